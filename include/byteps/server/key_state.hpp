#pragma once
/// @file
/// `server::sync_sum`'s state for one partition key: its shape (fixed by the first push ever,
/// `key_shape`), the round being summed, who pushed, and the two sum buffers. How a round's
/// pushes become its sum is a strategy per kind of round: whole pushes in pool buffers
/// (`whole_round`), or pushes their links lend, held where they are (`lent_round`). Owned and
/// touched by one engine thread only. Who waits for the sum is the server's business
/// (`waiting.hpp`), not the key's.
///
/// With failover on (`Config::failover_timeout` > 0) a key also:
/// - adopts the round of the first push or `sum_offer` it ever sees (a replacement server starts
///   empty in the middle of a job);
/// - sums the workers' contributions in worker-rank order (a push that arrives before a lower
///   rank's is held until its turn), so the sum is the same bits whatever order pushes arrive
///   in, on the first server and on its replacement alike;
/// - takes a `sum_offer`: the sum of a round that some worker already received from the dead
///   server. An offer of the current round completes it with those bytes (the workers that
///   re-pushed it get them); an offer of the previous round keeps it for a worker that re-pushes
///   that round later (`previous_sum`).
///
/// Elastic mode (docs/plans/issue-39-elastic.md) changes who takes part: `restart_round` names
/// the members from then on and starts the round in flight again under the same number.

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/dtype.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/key_shape.hpp"
#include "byteps/server/lent_round.hpp"
#include "byteps/server/whole_round.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

class key_state : public key_shape {
 public:
  /// `pool` takes back the buffers a key lets go of; it must outlive the key.
  /// `chunk`: the server's cut-through chunk (`Config::server_chunk_bytes`, 0 for a handler
  /// that does not stream); a key whose partition makes two chunks or more is `streamed()`.
  /// `rank_order`: whole pushes are summed in worker-rank order (always with failover).
  key_state(detail::buffer_pool& pool, bool failover, std::size_t chunk = 0,
            bool rank_order = false)
      : pool_(&pool), failover_(failover), whole_(pool, failover || rank_order), lent_(chunk) {}

  /// Checks worker `worker`'s push of `size` bytes for the current round and counts it as
  /// pushed. Returns what was wrong with it (the message for that worker alone), or "" when
  /// admitted. A push whose shape differs from the key's is admitted but poisons the round:
  /// everyone who pushed gets `round_error`. `hold`: the key's first push ever makes it one
  /// that holds its pushes where they are (`streamed()`, whatever its size: a landed push).
  template <class NameFn>
  std::string admit(const wire::header& h, std::size_t size, int worker, int num_workers,
                    NameFn&& tensor_name, bool hold = false) {
    auto t = dtype_from_wire(h.dtype);
    if (auto bad = check_frame(h, size, t, worker, num_workers, tensor_name); !bad.empty())
      return bad;
    if (failover_ && !shaped) round = h.round;  // a replacement joins a running job
    if (h.round != round)
      return fmt::format(
          "worker {} pushed round {} of {} partition {}, but the server is at "
          "round {}; was a push_pull skipped on one worker?",
          worker, h.round, tensor_name(), h.part, round);
    if (!shaped) {
      init_shape(h, *t, size, worker, num_workers, hold);
    } else if (!same(h, *t, size) && round_error.empty()) {
      round_error = mismatch(tensor_name(), worker, h, *t);
    }
    auto w = static_cast<std::size_t>(worker);
    if (!members_[w])
      return fmt::format(
          "worker {} pushed round {} of {} partition {}, but it is no longer a member of the "
          "job (it was removed from it); its pushes are not counted",
          worker, round, tensor_name(), h.part);
    if (pushed_by_[w])
      return fmt::format("worker {} pushed {} partition {} twice in round {}", worker,
                         tensor_name(), h.part, round);
    pushed_by_[w] = true;
    ++pushed_;
    if (h.flags & wire::flag_no_data) ++pushed_without_data_;
    if (pushed_ == member_count_ && pushed_without_data_ == pushed_ && round_error.empty())
      round_error = fmt::format(
          "no push of round {} of {} partition {} holds the broadcast's data: its root's "
          "machine was removed from the job (elastic training) before its push reached this "
          "server; broadcast again from a rank step_boundary() reports",
          round, tensor_name(), h.part);
    return {};
  }

  /// Takes worker `worker`'s whole push for the current round: `admit`, then adds it. The
  /// round is complete once `complete(num_workers)`.
  ///
  /// `received` holds the pushed bytes. The round's first contribution of a dtype summed in
  /// itself is not copied: its buffer becomes the round's sum buffer, and `received` gets the
  /// buffer it replaced (empty at first), for the caller to recycle. In failover mode a push
  /// that must wait for a lower rank's is kept (and `received` left empty).
  template <class NameFn>
  std::string accept(const wire::header& h, detail::buffer_pool::buffer& received, int worker,
                     int num_workers, NameFn&& tensor_name) {
    if (auto bad = admit(h, received.size, worker, num_workers, tensor_name); !bad.empty())
      return bad;
    if (round_error.empty()) whole_.take(worker, received, out_[round % 2], members_);
    return {};
  }

  /// Failover: takes a worker's copy of round `h.round`'s sum (see the file comment). Returns
  /// what was wrong with it, or "". `completes` is set when the offer completes the current
  /// round: the caller then answers the round's waiting workers with `finish_round()` and calls
  /// `next_round()`.
  template <class NameFn>
  std::string offer(const wire::header& h, detail::buffer_pool::buffer& received, int worker,
                    int num_workers, bool& completes, NameFn&& tensor_name,
                    std::uint32_t contributors = 0) {
    completes = false;
    auto t = dtype_from_wire(h.dtype);
    if (auto bad = check_frame(h, received.size, t, worker, num_workers, tensor_name); !bad.empty())
      return bad;
    if (!shaped) {
      init_shape(h, *t, received.size, worker, num_workers);
      round = h.round + 1;
      keep(h.round, received);
      offered_[h.round % 2] = contributors;
      previous_valid_ = true;
      return {};
    }
    if (!same(h, *t, received.size))
      return fmt::format(
          "worker {} offered a sum of {} partition {} with another shape than "
          "the workers pushed",
          worker, tensor_name(), h.part);
    if (h.round + 1 < round) return {};  // older than what we hold: nobody needs it
    if (h.round + 1 == round) {
      if (!previous_valid_) {
        keep(h.round, received);
        offered_[h.round % 2] = contributors;
      }
      previous_valid_ = true;
      return {};
    }
    if (h.round != round)
      return fmt::format(
          "worker {} offered the sum of round {} of {} partition {}, but the "
          "server is at round {}: no worker can have it yet",
          worker, h.round, tensor_name(), h.part, round);
    // Some worker already has this round's sum: it is the round's result, whatever was re-pushed.
    whole_.next_round(members_);  // nothing more is added to it
    keep(round, received);
    offered_[round % 2] = contributors;
    round_error.clear();
    completes = true;
    return {};
  }

  /// Failover: the sum of round `r` when it is the previous round and this key holds it (for a
  /// worker that re-pushes the round whose answer the dead server never delivered to it).
  std::optional<std::span<const std::byte>> previous_sum(std::uint64_t r) const {
    if (!previous_valid_ || r + 1 != round) return std::nullopt;
    return out_[r % 2].span();
  }

  /// Elastic training with failover: the worker processes round `r`'s sum holds when a worker
  /// offered it (0 when the sum was made here, over the members of now).
  std::uint32_t offered_contributors(std::uint64_t r) const noexcept { return offered_[r % 2]; }

  /// Workers whose push of the current round was accepted (a poisoned round's included).
  int pushed() const noexcept { return pushed_; }

  /// Every member pushed the current round and all of their bytes are in.
  bool complete() const noexcept {
    return shaped && pushed_ == member_count_ && lent_.arriving() == 0;
  }

  /// Elastic mode: from now on only the workers `members` marks (by worker index) take part,
  /// and a round completes once each of them pushed it. A round in flight (some push of it
  /// admitted) starts again under the same number: its pushes, partial sum and the pieces
  /// already answered are discarded, since a removed worker's bytes may be in them and cannot
  /// be taken out exactly. Returns the members whose push was admitted: they must push the
  /// round again (`redo`); the others push it as usual. A released round is never touched.
  /// `members` names at least one worker.
  BYTEPS_DECL std::vector<int> restart_round(const std::vector<bool>& members);

  /// This key's pushes are lent and held where they are (`lent_round`): streamed (its size
  /// makes two chunks or more), landed or in place (its first push came that way).
  bool streamed() const noexcept { return lent_.holds(); }

  /// Makes a key shaped by a `sum_offer` (failover) hold its pushes from now on, as one shaped
  /// by a landed push does. Only between rounds' pushes (`pushed() == 0`); an offered sum kept
  /// in either buffer stays.
  void hold_inputs() {
    lent_.hold(static_cast<int>(pushed_by_.size()));
    for (auto& o : out_)
      if (!o.data) o = pool_->take(bytes);
  }

  /// Lent pushes (`streamed()`): worker `worker`'s push, just admitted, arrives in `in`.
  void take_input(int worker, const payload_ref& in) { lent_.take(worker, in); }

  /// Lent pushes: whether `owner`'s frame is worker `worker`'s push of the current round (a
  /// refused frame, or one of a round that ended without it, is not).
  bool is_input(int worker, const void* owner) const noexcept {
    return lent_.is_input(worker, owner);
  }

  /// Lent pushes: worker `worker`'s push has `bytes_in` bytes in (all when `done`). Sums the
  /// chunks that every worker's bytes now cover, once every worker pushed a sound round, and
  /// returns where they start in the partition and how many bytes they are: the next piece of
  /// the answer (0 bytes: nothing new).
  std::pair<std::size_t, std::size_t> arrived(int worker, std::size_t bytes_in, bool done) {
    const bool summable = round_error.empty() && pushed_ == member_count_;
    return lent_.arrived(worker, bytes_in, done, summable,
                         out_[round % 2].span().first(bytes), type, members_);
  }

  /// Lent pushes: bytes of the current round's sum already answered in pieces.
  std::size_t answered_bytes() const noexcept { return lent_.answered(); }

  /// The current round's sum buffer (a streamed key's pieces point into it).
  std::span<const std::byte> sum_buffer() const noexcept { return out_[round % 2].span(); }

  /// The round's sum, in the tensor's dtype; valid until round + 2 begins.
  std::span<const std::byte> finish_round() {
    auto& out = out_[round % 2];
    whole_.finish(out);  // (nothing to finish for lent pushes, summed in chunks, or an offer)
    return out.span();
  }

  BYTEPS_DECL void next_round();

  std::uint64_t round = 0;
  std::string round_error;

 private:
  BYTEPS_DECL void init_shape(const wire::header& h, dtype t, std::size_t size, int worker,
                              int num_workers, bool hold = false);

  // Sizes `members_` for `workers` workers (all of them when no restart named members) and
  // counts them.
  BYTEPS_DECL void fit_members(std::size_t workers);

  // Makes `b`'s bytes the sum of round `r`; `b` may come back holding a buffer to recycle.
  BYTEPS_DECL void keep(std::uint64_t r, detail::buffer_pool::buffer& b);

  detail::buffer_pool* pool_;
  bool failover_ = false;
  std::vector<bool> pushed_by_;
  int pushed_ = 0;                      // count of pushed_by_
  int pushed_without_data_ = 0;         // of those, flagged wire::flag_no_data
  // By worker: takes part (all, unless elastic mode removed some). The one copy: whole_ and
  // lent_ are handed it.
  std::vector<bool> members_;
  int member_count_ = 0;                // count of members_
  detail::buffer_pool::buffer out_[2];  // the sums of even and odd rounds
  std::uint32_t offered_[2] = {0, 0};  // by out_ buffer: an offered sum's contributor count
  bool previous_valid_ = false;  // failover: out_[(round - 1) % 2] holds the previous round's sum
  whole_round whole_;            // the round's pushes, when they come whole in pool buffers
  lent_round lent_;              // the round's pushes, when their links lend them
};

}  // namespace bps::server

#if BYTEPS_INCLUDE_BODIES
#include "byteps/server/impl/key_state.hpp"
#endif
