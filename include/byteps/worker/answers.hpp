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

#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <span>
#include <string>

#include <fmt/format.h>

#include "byteps/compress/compressor.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/wire/frame.hpp"
#include "byteps/worker/op_table.hpp"
#include "byteps/worker/server_receiver.hpp"

namespace bps::worker {

template <class Node>
class answers {
 public:
  explicit answers(Node& node) : node_(node) {}
  answers(const answers&) = delete;
  answers& operator=(const answers&) = delete;

  // I/O thread: where an answer lands. Marks the operation as being written into.
  std::span<std::byte> answer_destination(const wire::header& h, op_ptr& receiving) {
    std::lock_guard lock(node_.mu_);
    auto* p = node_.ops().awaiting(key_id{h.key, h.part});
    if (p == nullptr || p->round != h.round || p->op->failure) return {};
    tensor* t = p->op->compressed ? &node_.ops().at(h.key) : nullptr;
    const bool fits =
        t != nullptr ? h.payload_bytes <= t->codecs[h.part]->max_encoded_bytes(p->bytes, t->type)
                     : h.payload_bytes == p->bytes;
    if (!fits) return {};
    if (node_.failover_) return node_.failover_->answer_destination(h, *p, receiving);
    ++p->op->receiving;
    receiving = p->op;
    if (t == nullptr) return p->op->data.subspan(p->offset, p->bytes);
    auto& encoded = t->answers[h.part];  // the decode stage writes the caller's buffer
    encoded.resize(h.payload_bytes);
    return encoded;
  }

  // The decode stage, outside the mutex: writes the answer `in` for `h`'s partition into the
  // caller's buffer (decoded with the partition's compressor, or copied), averaged if asked.
  // False, writing nothing, when the operation no longer awaits it. Only this partition's answer
  // uses its compressor now: the next encode comes after the operation is done.
  bool deliver(const wire::header& h, const op_ptr& op, std::span<const std::byte> in) {
    std::span<std::byte> dest;
    compress::any* codec = nullptr;
    {
      std::lock_guard lock(node_.mu_);
      auto* p = node_.ops().awaiting(key_id{h.key, h.part});
      if (p == nullptr || p->op != op || op->failure) return false;
      dest = op->data.subspan(p->offset, p->bytes);
      if (op->compressed) codec = node_.ops().at(h.key).codecs[h.part].get();
    }
    if (codec != nullptr)
      codec->decode(in, op->type, dest);
    else if (in.data() != dest.data())
      std::memcpy(dest.data(), in.data(), dest.size());
    if (op->average)
      reduce::scale(dest.data(), dest.size() / dtype_size(op->type), op->type,
                    1.0 / node_.global_size_);
    return true;
  }

  // I/O thread: the answer for `h` is in.
  void answered(const wire::header& h, const op_ptr& op, std::span<std::byte> payload) {
    node_.trace_.answered(*op, h.part);
    if (node_.failover_) return node_.failover_->answered(h, op, payload);
    if (op->compressed) {
      deliver(h, op, payload);
      std::lock_guard lock(node_.mu_);
      --op->receiving;
      return node_.ops().answered(key_id{h.key, h.part}, op);
    }
    if (op->average && !op->failure)
      reduce::scale(payload.data(), payload.size() / dtype_size(op->type), op->type,
                    1.0 / node_.global_size_);
    std::lock_guard lock(node_.mu_);
    --op->receiving;
    node_.ops().answered(key_id{h.key, h.part}, op);
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
};

}  // namespace bps::worker
