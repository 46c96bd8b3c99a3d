#pragma once
/// @file
/// `server::whole_round`: how a `key_state` sums a round of whole pushes, each in a buffer of
/// the server's pool (TCP, or any key whose pushes are not lent, server/handler.hpp). Each push
/// is added to the round's sum as it comes; with failover in worker-rank order instead (a push
/// that arrives before a lower rank's is held until its turn), so the sum is the same bits on
/// the first server and on its replacement. The round's first contribution of a dtype summed in
/// itself becomes the sum buffer without a copy; fp16 and bf16 accumulate in fp32.

#include <cstddef>
#include <utility>
#include <vector>

#include "byteps/core/dtype.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/reduce/reducer.hpp"

namespace bps::server {

class whole_round {
 public:
  /// `pool` takes back the pushes a round lets go of; `rank_order`: failover's order.
  whole_round(detail::buffer_pool& pool, bool rank_order) : pool_(&pool), rank_order_(rank_order) {}

  /// The key's shape is fixed: `count` elements of `t` per push, from `num_workers` workers.
  BYTEPS_DECL void shape(dtype t, std::size_t count, int num_workers);

  /// Sums in an fp32 accumulator of its own (fp16, bf16): the key's sum buffers then stay
  /// preallocated, and an offered sum is copied into them.
  bool accumulates_wide() const noexcept { return !wide_.empty(); }

  /// Worker `worker`'s push of the round, admitted, into `sum`, the round's sum buffer. `b` may
  /// come back holding a buffer to recycle (the one the push replaced as the sum, or none).
  /// `members` (by worker) marks who takes part: rank order skips the others.
  BYTEPS_DECL void take(int worker, detail::buffer_pool::buffer& b,
                        detail::buffer_pool::buffer& sum, const std::vector<bool>& members);

  /// The round's sum in `sum`, in the key's dtype (fp16, bf16: out of the fp32 accumulator).
  BYTEPS_DECL void finish(detail::buffer_pool::buffer& sum);

  /// The pushes still waiting for their turn go back and nothing is added any more: the round
  /// ends, an offered sum completed it (failover), or it starts again (elastic mode). Rank order
  /// starts at the first worker `members` marks.
  BYTEPS_DECL void next_round(const std::vector<bool>& members);

 private:
  BYTEPS_DECL void add(detail::buffer_pool::buffer& b, detail::buffer_pool::buffer& sum);
  // Rank order: moves `next_` past workers that take no part.
  void skip_non_members(const std::vector<bool>& members) {
    while (next_ < members.size() && !members[next_]) ++next_;
  }

  detail::buffer_pool* pool_;
  bool rank_order_;
  dtype type_ = dtype::float32;
  std::size_t count_ = 0;
  std::vector<std::byte> wide_;  // fp32 accumulator for fp16 and bf16
  std::size_t added_ = 0;        // contributions in the sum so far
  // Rank order only.
  std::vector<detail::buffer_pool::buffer> held_;  // by worker: pushes waiting for their turn
  std::size_t next_ = 0;                           // the worker whose push is added next
};

}  // namespace bps::server

#if BYTEPS_INCLUDE_BODIES
#include "byteps/server/impl/whole_round.hpp"
#endif
