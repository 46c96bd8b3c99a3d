#pragma once
/// @file
/// `server::lent_round`: how a `key_state` sums a round of pushes their links lend
/// (server/handler.hpp's `push_bytes`): streamed as their bytes arrive (cut-through), landed in a
/// landing buffer (RDMA) or lying in a colocated worker's ring (ipc). The key holds each
/// worker's push where it is, not a copy, and sums the chunks that every worker's bytes cover
/// straight into the round's sum buffer, in worker-rank order, so the bits do not depend on
/// arrival order or on how the bytes were cut. A whole lent push is one chunk of its full size.

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "byteps/core/dtype.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/server/handler.hpp"

namespace bps::server {

class lent_round {
 public:
  /// `max_chunk`: the server's largest cut-through chunk (`Config::server_chunk_bytes`; 0
  /// without); a partition is summed in `chunk_for` its size.
  explicit lent_round(std::size_t max_chunk) : max_chunk_(max_chunk) {}

  /// Whether pushes of `bytes` stream (`streamed_size` with this chunk): such a key holds them.
  bool streams(std::size_t bytes) const noexcept { return streamed_size(max_chunk_, bytes); }

  /// The key holds its pushes from now on (a streamed size, or a first push that was lent).
  BYTEPS_DECL void hold(int num_workers);
  bool holds() const noexcept { return !inputs_.empty(); }

  /// Worker `worker`'s push, just admitted, arrives in `in`.
  BYTEPS_DECL void take(int worker, const payload_ref& in);

  /// Whether `owner`'s frame is worker `worker`'s push of the round (a refused frame, or one of
  /// a round that ended without it, is not).
  bool is_input(int worker, const void* owner) const noexcept {
    const auto w = static_cast<std::size_t>(worker);
    return owner != nullptr && w < inputs_.size() && inputs_[w].owner.get() == owner;
  }

  /// Worker `worker`'s push has `bytes_in` bytes in (all when `done`). When `summable` (every
  /// member pushed and the round is sound), sums into `sum` (`count` elements of `t`) the
  /// chunks every member's bytes now cover (`members`, by worker, marks who takes part), and
  /// returns where they start and how many bytes they are: the next piece of the answer (0
  /// bytes: nothing new).
  BYTEPS_DECL std::pair<std::size_t, std::size_t> arrived(int worker, std::size_t bytes_in,
                                                          bool done, bool summable,
                                                          std::span<std::byte> sum, dtype t,
                                                          const std::vector<bool>& members);

  /// Pushes of the round whose bytes are not all in.
  int arriving() const noexcept { return arriving_; }
  /// Bytes of the round's sum already summed and answered in pieces.
  std::size_t answered() const noexcept { return answered_; }

  /// The pushes' owners go (their links reuse the bytes once every hold is gone): the round
  /// ends, or it starts again (elastic mode).
  BYTEPS_DECL void next_round();

 private:
  std::size_t max_chunk_ = 0;
  std::vector<payload_ref> inputs_;  // by worker: its push of this round (empty: none yet)
  std::vector<std::size_t> in_;      // by worker: bytes of its push that are in
  int arriving_ = 0;
  std::size_t answered_ = 0;
  std::vector<const std::byte*> sources_;
};

}  // namespace bps::server

#if BYTEPS_INCLUDE_BODIES
#include "byteps/server/impl/lent_round.hpp"
#endif
