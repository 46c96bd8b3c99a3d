#pragma once
/// @file
/// `server::sync_sum`, the `ServerHandler` of synchronous training, as BytePS does it (the
/// default handler, `server::decoding<sync_sum>`, wraps it to decode compressed pushes first).
/// Each key's round waits for one push from every worker; the last one releases the sum to all.
/// fp16 and bf16 accumulate in fp32. The sum of round r lives in buffer r % 2 of the key
/// (`key_state.hpp`): a worker can only push round r+1 after it received round r, so round r+1's
/// sum never overwrites bytes still being sent for round r, and the answers need no owner.
///
/// Cut-through (`Config::server_chunk_bytes`): a key whose partition makes two chunks or more
/// is summed while its pushes arrive. Each chunk that every worker's bytes cover is summed
/// straight into the round's buffer, in worker-rank order, and sent as a piece of the answer
/// (`outcome::piece`), so the answer flows back while the pushes still flow in. The bits are
/// those of a whole rank-order sum: chunking changes when a sum is taken, not what it is.
///
/// Landed pushes (lent bytes, whole: `push_bytes`; a transport that registers memory): the key
/// holds each worker's landing buffer, not a copy, and sums them all straight into buffer r % 2 in
/// worker-rank order once every push is in (a streamed key's path, in one piece). No push
/// buffer becomes the sum, since the landing buffer takes that worker's next round; it is read
/// before the round is answered, and a worker pushes again only after its answer.
///
/// With failover on, a replacement server starts empty: each key adopts the round of the first
/// push or `sum_offer`, a worker that re-pushes the previous round (whose answer the dead server
/// never sent it) is answered at once with that round's sum, and an offer of the current round
/// completes it with the offered bytes. Sums are taken in worker-rank order so they are the same
/// bits on every server.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/key_state.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

class sync_sum {
 public:
  /// Takes pushes as they arrive (cut-through): see `lent`.
  static constexpr bool cut_through = true;
  /// Takes landed pushes (RDMA): a key whose pushes land holds them where they are and sums
  /// them in worker-rank order once all are in, as a streamed key does.
  static constexpr bool reads_in_place = true;

  sync_sum(const Config& cfg, detail::buffer_pool& pool)
      : pool_(&pool),
        chunk_(cfg.server_chunk_bytes),
        rank_order_(cfg.elastic()),
        offers_count_(cfg.elastic()) {
    check_config(cfg);
  }

  /// @throws usage_error in async mode (`Config::enable_async`): workers would get sums where
  /// they expect parameters.
  BYTEPS_DECL static void check_config(const Config& cfg);

  BYTEPS_DECL outcome handle(const request& r);

  /// Elastic mode (`restarts_rounds`): only the workers `members` marks take part from now on,
  /// in the keys this handler holds and in those it makes later. Each key's round in flight
  /// starts over (`key_state::restart_round`); one entry per key whose round had pushes in.
  BYTEPS_DECL std::vector<round_redo> restart_rounds(const std::vector<bool>& members);

 private:
  // Lent bytes (streamed, landed, in place): the key holds each worker's push where it is.
  // Cut-through: a push of a streamed key is summed chunk by chunk, in worker-rank order, as
  // soon as every worker's bytes cover the chunk, and each summed run goes out at once as a
  // piece of the answer; the piece that completes the round is the last. A round whose every
  // push arrived whole is answered whole, as an unstreamed key's.
  BYTEPS_DECL outcome lent(key_state& k, const request& r);

  BYTEPS_DECL static reply piece(const key_state& k, std::size_t from, std::size_t bytes);

  BYTEPS_DECL static reply sum(const key_state& k, std::span<const std::byte> bytes,
                               std::uint64_t round);

  // The round is complete: its sum (or its error) for everyone waiting, and the next round.
  BYTEPS_DECL static outcome finish(key_state& k);

  detail::buffer_pool* pool_;
  std::size_t chunk_;
  // Elastic training sums whole pushes in worker-rank order, as failover does, so that a run
  // that loses a worker at a known round can be replayed bit for bit.
  bool rank_order_ = false;
  bool offers_count_ = false;  // elastic: a sum_offer ends with its contributor count
  std::unordered_map<key_id, key_state, key_id_hash> keys_;
  std::vector<bool> members_;  // elastic: who takes part (empty: every worker)
};

static_assert(ServerHandler<sync_sum>);
static_assert(restarts_rounds<sync_sum>);

}  // namespace bps::server

#if BYTEPS_INCLUDE_BODIES
#include "byteps/server/impl/sync_sum.hpp"
#endif
