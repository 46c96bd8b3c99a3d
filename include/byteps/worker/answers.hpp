#pragma once
/// @file
/// `bps::worker::answers<Node>`: what a worker does with what its servers send, on the links'
/// I/O threads (`server_receiver` calls it): an answer is read straight into the caller's buffer
/// (or, for a compressed operation, into its partition's encoded buffer, then decoded: the
/// decode stage), averaged if asked, and its partition marked answered; an error frame fails the
/// tensor's operation (or, when fatal, the server); a closed link fails the communicator or hands
/// the server to failover. With failover on, answers go through `failover<Node>` instead, which
/// keeps a copy of each sum.
///
/// @par Thread Safety
/// Called on the links' I/O threads; takes the node's mutex briefly, and decodes, copies and
/// averages outside it.

#include <fmt/core.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <string>

#include "byteps/compress/compressor.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/wire/frame.hpp"
#include "byteps/worker/op_table.hpp"
#include "byteps/worker/registered_memory.hpp"
#include "byteps/worker/server_receiver.hpp"

namespace bps::worker {

template <class Node>
class answers {
 public:
  explicit answers(Node& node) : node_(node) {}
  answers(const answers&) = delete;
  answers& operator=(const answers&) = delete;

  // I/O thread: where an answer lands. Marks the operation as being written into. An answer
  // comes whole or, from a server summing as pushes arrive, in pieces: each lands after the last.
  std::span<std::byte> answer_destination(const wire::header& h, op_ptr& receiving) {
    std::lock_guard lock(node_.mu_);
    auto* p = node_.ops().awaiting(key_id{h.key, h.part});
    if (p == nullptr || p->round != h.round || p->op->failure) return {};
    tensor* t = p->op->compressed ? &node_.ops().at(h.key) : nullptr;
    // A server encodes the answer exactly when it decodes the pushes.
    if (((h.flags & wire::flag_compressed) != 0) != (t != nullptr && t->server_decoded)) return {};
    // Async training with failover: the parameters end with the counts failover keeps.
    const bool counted = (h.flags & wire::flag_applied) != 0;
    if (counted && !(node_.failover_ && node_.async_mode())) return {};
    const std::size_t at = p->answered_bytes, n = h.payload_bytes,
                      whole = p->bytes +
                              (counted ? wire::applied_counts_bytes(node_.cfg_.num_workers) : 0);
    const bool fits = t != nullptr
                          ? at + n <= t->codecs[h.part]->max_encoded_bytes(p->bytes, t->type)
                          : (is_last(h) ? at + n == whole : at + n < p->bytes);
    const bool in_order = (h.flags & wire::flag_piece) != 0 ? h.offset == p->offset + at : at == 0;
    if (!fits || !in_order) return {};
    if (node_.failover_) return node_.failover_->answer_destination(h, *p, at, receiving);
    ++p->op->receiving;
    receiving = p->op;
    if (t == nullptr) return p->op->data.subspan(p->data_offset + at, n);
    auto& encoded = t->answers[h.part];  // the decode stage writes the caller's buffer
    encoded.resize(at + n);
    return std::span(encoded).subspan(at);
  }

  // I/O thread: an answer_batch of `records` came in (tensor fusion); its records follow as
  // pull_responses.
  void answer_batch(std::size_t records) {
    std::lock_guard lock(node_.mu_);
    node_.ops().stats().answers_batched(records);
  }

  // Memory the trainer registered (Communicator::register_memory): an answer's destination
  // inside it stays put, so the transport may cache it (I/O thread).
  void registered(std::span<const std::byte> m) { registered_.add(m); }
  bool answer_stays(std::span<const std::byte> dest) const { return registered_.contains(dest); }

  // A whole answer, or the last piece of one.
  static bool is_last(const wire::header& h) {
    return (h.flags & wire::flag_piece) == 0 || (h.flags & wire::flag_last_piece) != 0;
  }

  // The decode stage, outside the mutex: writes the answer `in` for `h`'s partition into the
  // caller's buffer (decoded with the partition's compressor, or copied), averaged if asked.
  // False, writing nothing, when the operation no longer awaits it. Only this partition's answer
  // uses its compressor now: the next encode comes after the operation is done.
  bool deliver(const wire::header& h, const op_ptr& op, std::span<const std::byte> in) {
    std::span<std::byte> dest;
    compress::any* codec = nullptr;
    int server = 0;
    {
      std::lock_guard lock(node_.mu_);
      auto* p = node_.ops().awaiting(key_id{h.key, h.part});
      if (p == nullptr || p->op != op || op->failure) return false;
      dest = op->data.subspan(p->data_offset, p->bytes);
      server = p->server;
      if (op->compressed) codec = node_.ops().at(h.key).codecs[h.part].get();
    }
    if (codec != nullptr) {
      try {
        const auto began = op_table::clock::now();
        codec->decode(in, op->type, dest);
        const auto took = stats_recorder::seconds(op_table::clock::now() - began);
        std::lock_guard lock(node_.mu_);
        if (auto* t = node_.ops().find_tensor(h.key); t != nullptr && t->active == op)
          t->timing.stages.add(stage::decode, took);
      } catch (const std::exception& e) {  // a malformed answer: this operation fails, no crash
        std::lock_guard lock(node_.mu_);
        node_.ops().fail(op, std::make_exception_ptr(communicator_error(fmt::format(
                                 "{}: the answer for partition {} from server {} does not "
                                 "decode with compressor '{}': {}",
                                 op->what, h.part, server, codec->name(), e.what()))));
        return true;  // its partition is done with: the caller marks it answered
      }
    } else if (in.data() != dest.data())
      std::memcpy(dest.data(), in.data(), dest.size());
    if (op->average)
      reduce::scale(dest.data(), dest.size() / dtype_size(op->type), op->type,
                    1.0 / node_.global_size_);
    return true;
  }

  // I/O thread: the answer for `h` (or this piece of it) is in.
  void answered(const wire::header& h, const op_ptr& op, std::span<std::byte> payload) {
    const bool last = is_last(h);
    if (last && op->trace) {  // on the partition's lane, while it is still awaited
      std::size_t index = 0;
      bool awaited = false;
      {
        std::lock_guard lock(node_.mu_);
        if (auto* p = node_.ops().awaiting(key_id{h.key, h.part}); p != nullptr && p->op == op) {
          index = p->index;
          awaited = true;
        }
      }
      if (awaited) node_.trace_.answered(*op, index, h.key, h.part);
    }
    if (node_.failover_) return node_.failover_->answered(h, op, payload, last);
    if (op->compressed) {
      if (last) {
        std::span<const std::byte> encoded;
        {
          std::lock_guard lock(node_.mu_);
          encoded = node_.ops().at(h.key).answers[h.part];
        }
        deliver(h, op, encoded);
      }
    } else if (op->average && !op->failure) {
      reduce::scale(payload.data(), payload.size() / dtype_size(op->type), op->type,
                    1.0 / node_.global_size_);
    }
    std::lock_guard lock(node_.mu_);
    --op->receiving;
    if (last) return node_.ops().answered(key_id{h.key, h.part}, op);
    piece_in(key_id{h.key, h.part}, op, payload.size());
  }

  // Under the node's mutex: a piece (not the last) of `id`'s answer is in.
  void piece_in(key_id id, const op_ptr& op, std::size_t bytes) {
    if (auto* p = node_.ops().awaiting(id); p != nullptr && p->op == op) p->answered_bytes += bytes;
    node_.ops().release_if_done(op);
  }

  void server_error(int server, std::uint64_t generation, const wire::header& h,
                    const std::string& text) {
    std::lock_guard lock(node_.mu_);
    auto& slot = node_.links_[server];
    if (generation != slot.generation) return;  // from a server already replaced
    if (h.flags & wire::flag_fatal) {
      if (!node_.failover_)
        return node_.die_locked(fmt::format("server {} at {}: {}", server, slot.address, text));
      // Failover: a server that gave up (it lost the scheduler, or a worker) is lost to us; the
      // scheduler either replaces it or fails the job (naming the real cause).
      if (slot.up && node_.dead_.empty() && !node_.closing_) {
        node_.failover_->server_down_locked(server, "it reported: " + text);
        slot.link->close();
      }
      return;
    }
    auto* t = node_.ops().find_tensor(h.key);
    if (t == nullptr || !t->active) return;
    node_.ops().fail(t->active, std::make_exception_ptr(
                                    usage_error(fmt::format("{}: {}", t->active->what, text))));
  }

  void server_closed(int server, std::uint64_t generation, const op_ptr& receiving, key_id id,
                     const std::string& reason) {
    std::lock_guard lock(node_.mu_);
    if (receiving) {
      if (auto* p = node_.ops().awaiting(id); p != nullptr && p->op == receiving)
        p->receiving = false;
      --receiving->receiving;
      node_.ops().release_if_done(receiving);
    }
    node_.links_.closed(server, generation);
    if (node_.closing_ || !node_.dead_.empty()) return;
    auto& slot = node_.links_[server];
    if (!node_.failover_)
      return node_.die_locked(
          fmt::format("lost server {} at {}: {}", server, slot.address, reason));
    if (generation == slot.generation && slot.up)
      node_.failover_->server_down_locked(server, reason);
  }

 private:
  Node& node_;
  registered_memory registered_;
};

}  // namespace bps::worker
