#pragma once
/// @file
/// `bps::worker::answers<Node>`: what a worker does with what its servers send, on the links'
/// I/O threads (`server_receiver` calls it): an answer is read straight into the caller's buffer
/// (or, for a compressed operation, into its partition's encoded buffer, then decoded: the
/// decode stage), averaged if asked, and its partition marked answered; an error frame fails the
/// tensor's operation (or, when fatal, the server); a table call's answer is written into the
/// caller's rows (worker/row_calls.hpp); a closed link fails the communicator or hands
/// the server to failover. With failover on, answers land where its `answer_keeper` says
/// (`failover`, which keeps a copy of each sum), and a lost server is handed to it.
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
#include "byteps/worker/dispatcher.hpp"
#include "byteps/worker/op_table.hpp"
#include "byteps/worker/registered_memory.hpp"
#include "byteps/worker/row_calls.hpp"
#include "byteps/worker/server_receiver.hpp"

namespace bps::worker {

/// What failover changes in how answers land (`worker::failover` implements it): each is
/// called instead of what `answers` would do itself.
class answer_keeper {
 public:
  /// Under the worker's mutex: where the answer for `p` lands, `at` bytes into it.
  virtual std::span<std::byte> answer_destination(const wire::header& h, pending_part& p,
                                                  std::size_t at, op_ptr& receiving) = 0;
  /// I/O thread: the answer for `h` (`last`), or one more piece of it, is in.
  virtual void answered(const wire::header& h, const op_ptr& op, std::span<std::byte> payload,
                        bool last) = 0;
  /// Under the worker's mutex: the link to `server` dropped or the server gave up.
  virtual void server_down_locked(int server, const std::string& reason) = 0;

 protected:
  ~answer_keeper() = default;
};

/// Under the worker's mutex: sends pending partition `part` of `t` (`key`) again on `link`, as
/// it was pushed (an encoded push is re-sent, never re-encoded), its answer starting afresh. The
/// re-push took no scheduling credit, so it returns none when it leaves.
template <class State, class Link>
void repush_locked(State& state, tensor& t, std::uint64_t key, std::uint32_t part,
                   pending_part& p, Link& link) {
  p.answered_bytes = 0;
  ++p.op->in_transport;
  auto payload = state.dispatcher.push_payload(t, part, p, false);
  state.ops().stats().pushed(p.server, payload.size());
  link.send(push_frame(t, key, part, p, state.machine), payload, [&state, op = p.op] {
    std::lock_guard lock(state.mu);
    --op->in_transport;
    state.ops().release_if_done(op);
  });
}

/// `State` is the worker's `shared_state`.
template <class State>
class answers {
 public:
  explicit answers(State& state) : state_(state) {}
  answers(const answers&) = delete;
  answers& operator=(const answers&) = delete;

  /// Failover's, from when it is made (before any link starts).
  void keep_with(answer_keeper* k) noexcept { keeper_ = k; }

  // I/O thread: where an answer lands. Marks the operation as being written into. An answer
  // comes whole or, from a server summing as pushes arrive, in pieces: each lands after the last.
  std::span<std::byte> answer_destination(const wire::header& h, op_ptr& receiving) {
    std::lock_guard lock(state_.mu);
    auto* p = state_.ops().awaiting(key_id{h.key, h.part});
    if (p == nullptr || p->round != h.round || p->op->failure) return {};
    tensor* t = p->op->compressed ? &state_.ops().at(h.key) : nullptr;
    // A server encodes the answer exactly when it decodes the pushes.
    if (((h.flags & wire::flag_compressed) != 0) != (t != nullptr && t->server_decoded)) return {};
    // Async training with failover: the parameters end with the counts failover keeps.
    const bool counted = (h.flags & wire::flag_applied) != 0;
    if (counted && !(keeper_ != nullptr && state_.cfg.enable_async)) return {};
    const std::size_t at = p->answered_bytes, n = h.payload_bytes,
                      whole = p->bytes +
                              (counted ? wire::applied_counts_bytes(state_.cfg.num_workers) : 0);
    const bool fits = t != nullptr
                          ? at + n <= t->codecs[h.part]->max_encoded_bytes(p->bytes, t->type)
                          : (is_last(h) ? at + n == whole : at + n < p->bytes);
    const bool in_order = (h.flags & wire::flag_piece) != 0 ? h.offset == p->offset + at : at == 0;
    if (!fits || !in_order) return {};
    if (keeper_ != nullptr) return keeper_->answer_destination(h, *p, at, receiving);
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
    std::lock_guard lock(state_.mu);
    state_.ops().stats().answers_batched(records);
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
      std::lock_guard lock(state_.mu);
      auto* p = state_.ops().awaiting(key_id{h.key, h.part});
      if (p == nullptr || p->op != op || op->failure) return false;
      dest = op->data.subspan(p->data_offset, p->bytes);
      server = p->server;
      if (op->compressed) codec = state_.ops().at(h.key).codecs[h.part].get();
    }
    if (codec != nullptr) {
      try {
        const auto began = op_table::clock::now();
        codec->decode(in, op->type, dest);
        const auto took = stats_recorder::seconds(op_table::clock::now() - began);
        std::lock_guard lock(state_.mu);
        if (auto* t = state_.ops().find_tensor(h.key); t != nullptr && t->active == op)
          t->timing.stages.add(stage::decode, took);
      } catch (const std::exception& e) {  // a malformed answer: this operation fails, no crash
        std::lock_guard lock(state_.mu);
        state_.ops().fail(op, std::make_exception_ptr(communicator_error(fmt::format(
                                  "{}: the answer for partition {} from server {} does not "
                                  "decode with compressor '{}': {}",
                                  op->what, h.part, server, codec->name(), e.what()))));
        return true;  // its partition is done with: the caller marks it answered
      }
    } else if (in.data() != dest.data())
      std::memcpy(dest.data(), in.data(), dest.size());
    if (op->average)
      reduce::scale(dest.data(), dest.size() / dtype_size(op->type), op->type,
                    1.0 / contributors(h));
    return true;
  }

  // I/O thread: the answer for `h` (or this piece of it) is in.
  void answered(const wire::header& h, const op_ptr& op, std::span<std::byte> payload) {
    const bool last = is_last(h);
    if (last && op->trace) {  // on the partition's lane, while it is still awaited
      std::size_t index = 0;
      bool awaited = false;
      {
        std::lock_guard lock(state_.mu);
        if (auto* p = state_.ops().awaiting(key_id{h.key, h.part}); p != nullptr && p->op == op) {
          index = p->index;
          awaited = true;
        }
      }
      if (awaited) state_.trace.answered(*op, index, h.key, h.part);
    }
    if (keeper_ != nullptr) return keeper_->answered(h, op, payload, last);
    if (op->compressed) {
      if (last) {
        std::span<const std::byte> encoded;
        {
          std::lock_guard lock(state_.mu);
          encoded = state_.ops().at(h.key).answers[h.part];
        }
        deliver(h, op, encoded);
      }
    } else if (op->average && !op->failure) {
      reduce::scale(payload.data(), payload.size() / dtype_size(op->type), op->type,
                    1.0 / contributors(h));
    }
    std::lock_guard lock(state_.mu);
    --op->receiving;
    if (last) return state_.ops().answered(key_id{h.key, h.part}, op);
    piece_in(key_id{h.key, h.part}, op, payload.size());
  }

  // Under the node's mutex: a piece (not the last) of `id`'s answer is in.
  void piece_in(key_id id, const op_ptr& op, std::size_t bytes) {
    if (auto* p = state_.ops().awaiting(id); p != nullptr && p->op == op)
      p->answered_bytes += bytes;
    state_.ops().release_if_done(op);
  }

  // The worker processes whose pushes `h`'s answer sums: the server says so with elastic
  // training (workers may have been removed since the job formed), else every one of the job.
  double contributors(const wire::header& h) const {
    return h.sender != 0 ? static_cast<double>(h.sender) : static_cast<double>(state_.global_size);
  }

  // I/O thread, elastic training: server `server` started `h`'s round over without a removed
  // worker and discarded this worker's push of it. No answer of that round reached the
  // caller's buffer (a server sums whole pushes then), so the buffer still holds the push.
  void redo(int server, std::uint64_t generation, const wire::header& h) {
    std::lock_guard lock(state_.mu);
    auto& slot = state_.links[server];
    if (generation != slot.generation || !slot.up || state_.life.gone()) return;
    const key_id id{h.key, h.part};
    auto* p = state_.ops().awaiting(id);
    if (p == nullptr || p->round != h.round || p->server != server || !p->dispatched ||
        p->receiving || p->op->failure)
      return;  // answered or failed meanwhile: nothing to push again
    repush_locked(state_, state_.ops().at(h.key), h.key, h.part, *p, *slot.link);
    state_.log.debug("{} partition {} round {}: pushed again at server {}'s request (a worker "
                     "was removed)",
                     p->op->what, h.part, h.round, server);
  }

  // I/O thread: the answer to a table call's request (worker/row_calls.hpp), whole in `payload`.
  void rows_answered(int server, std::uint64_t generation, const wire::header& h,
                     std::span<const std::byte> payload) {
    row_calls::delivery d;
    {
      std::lock_guard lock(state_.mu);
      if (generation != state_.links[server].generation) return;
      d = state_.rows.take(server, h, payload.size());
      if (!d.op) return;
    }
    row_calls::write(d, payload);
    std::lock_guard lock(state_.mu);
    state_.rows.delivered(d);
  }

  void server_error(int server, std::uint64_t generation, const wire::header& h,
                    const std::string& text) {
    std::lock_guard lock(state_.mu);
    auto& slot = state_.links[server];
    if (generation != slot.generation) return;  // from a server already replaced
    if (auto why = state_.rows.redeclaration_refused(server, h, text)) return state_.die_locked(*why);
    if (!(h.flags & wire::flag_fatal) && state_.rows.refused(server, h, text)) return;
    if (h.flags & wire::flag_fatal) {
      if (keeper_ == nullptr)
        return state_.die_locked(fmt::format("server {} at {}: {}", server, slot.address, text));
      // Failover: a server that gave up (it lost the scheduler, or a worker) is lost to us; the
      // scheduler either replaces it or fails the job (naming the real cause).
      if (slot.up && !state_.life.gone()) {
        keeper_->server_down_locked(server, "it reported: " + text);
        slot.link->close();
      }
      return;
    }
    auto* t = state_.ops().find_tensor(h.key);
    if (t == nullptr || !t->active) return;
    state_.ops().fail(t->active, std::make_exception_ptr(
                                     usage_error(fmt::format("{}: {}", t->active->what, text))));
  }

  void server_closed(int server, std::uint64_t generation, const op_ptr& receiving, key_id id,
                     const std::string& reason) {
    std::lock_guard lock(state_.mu);
    if (receiving) {
      if (auto* p = state_.ops().awaiting(id); p != nullptr && p->op == receiving)
        p->receiving = false;
      --receiving->receiving;
      state_.ops().release_if_done(receiving);
    }
    state_.links.closed(server, generation);
    if (state_.life.gone()) return;
    auto& slot = state_.links[server];
    if (keeper_ == nullptr)
      return state_.die_locked(
          fmt::format("lost server {} at {}: {}", server, slot.address, reason));
    if (generation == slot.generation && slot.up) keeper_->server_down_locked(server, reason);
  }

 private:
  State& state_;
  answer_keeper* keeper_ = nullptr;  // failover, when it is on
  registered_memory registered_;
};

}  // namespace bps::worker
