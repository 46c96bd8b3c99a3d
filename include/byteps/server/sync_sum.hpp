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
/// Landed pushes (`request::streamed`, whole; a transport that registers memory): the key holds
/// each worker's landing buffer, not a copy, and sums them all straight into buffer r % 2 in
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

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/key_state.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

class sync_sum {
 public:
  /// Takes pushes as they arrive (cut-through): see `streamed`.
  static constexpr bool cut_through = true;
  /// Takes landed pushes (RDMA): a key whose pushes land holds them where they are and sums
  /// them in worker-rank order once all are in, as a streamed key does.
  static constexpr bool reads_in_place = true;

  sync_sum(const Config& cfg, detail::buffer_pool& pool)
      : pool_(&pool), chunk_(cfg.server_chunk_bytes) {
    check_config(cfg);
  }

  /// @throws usage_error in async mode (`Config::enable_async`): workers would get sums where
  /// they expect parameters.
  static void check_config(const Config& cfg) {
    if (cfg.enable_async)
      throw usage_error(
          "BYTEPS_ENABLE_ASYNC=1, but this server sums synchronously (server::"
          "sync_sum): run Server<T, server::async_sum> (byteps-server does)");
  }

  outcome handle(const request& r) {
    const wire::header& h = r.head;
    auto& k = keys_.try_emplace(key_id{h.key, h.part}, *pool_, r.failover, chunk_).first->second;
    if (r.streamed != nullptr) return streamed(k, r);
    if (h.type == wire::msg::sum_offer) {
      bool completes = false;
      auto problem = k.offer(h, r.payload, r.worker, r.num_workers, completes, r.tensor_name);
      if (!problem.empty()) return outcome::refuse(std::move(problem));
      if (!completes) return outcome::taken();
      return finish(k);
    }
    if (r.failover && k.initialized()) {
      if (auto previous = k.previous_sum(h.round))
        return outcome::answer_now(sum(k, *previous, h.round));
    }
    auto problem = k.accept(h, r.payload, r.worker, r.num_workers, r.tensor_name);
    if (!problem.empty()) return outcome::refuse(std::move(problem));
    if (!k.complete(r.num_workers)) return outcome::wait();
    return finish(k);
  }

 private:
  // Cut-through: a push of a streamed key is summed chunk by chunk, in worker-rank order, as
  // soon as every worker's bytes cover the chunk, and each summed run goes out at once as a
  // piece of the answer; the piece that completes the round is the last. A round whose every
  // push arrived whole is answered whole, as an unstreamed key's.
  outcome streamed(key_state& k, const request& r) {
    const wire::header& h = r.head;
    const std::size_t size = r.streamed->bytes.size();
    // A whole push here on a key that does not hold its pushes yet: a landed push on a key a
    // sum_offer shaped (failover). Between rounds it starts holding them.
    if (k.initialized() && !k.streamed() && r.first && r.complete && k.pushed() == 0)
      k.hold_inputs();
    if (k.initialized() && !k.streamed()) {
      // An unstreamed key (its partition is smaller): this push cannot have its shape, which
      // poisons the round. Its first call counts it (and puts its worker among those the
      // round's error goes to); its bytes are never read.
      if (!r.first) return outcome::taken();
      auto problem = k.admit(h, size, r.worker, r.num_workers, r.tensor_name);
      if (!problem.empty()) return outcome::refuse(std::move(problem));
      return k.complete(r.num_workers) ? finish(k) : outcome::wait();
    }
    if (r.first) {
      if (r.failover && k.initialized()) {
        if (auto previous = k.previous_sum(h.round))
          return outcome::answer_now(sum(k, *previous, h.round));  // its later calls: taken
      }
      auto problem = k.admit(h, size, r.worker, r.num_workers, r.tensor_name, true);
      if (!problem.empty()) return outcome::refuse(std::move(problem));  // later calls: taken
      k.take_input(r.worker, *r.streamed);
    } else if (!k.is_input(r.worker, r.streamed->owner.get())) {
      return outcome::taken();
    }
    const auto [from, bytes] = k.arrived(r.worker, r.bytes_in, r.complete);
    if (k.complete(r.num_workers)) {
      if (!k.round_error.empty() || from == 0) return finish(k);  // no piece went out
      outcome o = outcome::piece(piece(k, from, bytes), true);
      k.next_round();
      return o;
    }
    if (bytes == 0) return outcome::wait();
    return outcome::piece(piece(k, from, bytes), false);
  }

  static reply piece(const key_state& k, std::size_t from, std::size_t bytes) {
    return {
        k.sum_buffer().subspan(from, bytes), k.round, k.type, k.offset + from, k.tensor_bytes, {}};
  }

  static reply sum(const key_state& k, std::span<const std::byte> bytes, std::uint64_t round) {
    return {bytes, round, k.type, k.offset, k.tensor_bytes, {}};
  }

  // The round is complete: its sum (or its error) for everyone waiting, and the next round.
  static outcome finish(key_state& k) {
    outcome o = k.round_error.empty() ? outcome::release(sum(k, k.finish_round(), k.round))
                                      : outcome::fail_round(k.round_error);
    k.next_round();  // the sum stays in buffer round % 2 until round + 2 begins
    return o;
  }

  detail::buffer_pool* pool_;
  std::size_t chunk_;
  std::unordered_map<key_id, key_state, key_id_hash> keys_;
};

static_assert(ServerHandler<sync_sum>);

}  // namespace bps::server
