#pragma once
/// @file
/// `server::sync_sum`, the default `ServerHandler`: synchronous training, as BytePS does it.
/// Each key's round waits for one push from every worker; the last one releases the sum to all.
/// fp16 and bf16 accumulate in fp32. The sum of round r lives in buffer r % 2 of the key
/// (`key_state.hpp`): a worker can only push round r+1 after it received round r, so round r+1's
/// sum never overwrites bytes still being sent for round r, and the answers need no owner.
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
#include "byteps/core/keys.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/key_state.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

class sync_sum {
 public:
  sync_sum(const Config&, detail::buffer_pool& pool) : pool_(&pool) {}

  outcome handle(const request& r) {
    const wire::header& h = r.head;
    auto& k = keys_.try_emplace(key_id{h.key, h.part}, *pool_, r.failover).first->second;
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
    if (k.pushed() < r.num_workers) return outcome::wait();
    return finish(k);
  }

 private:
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
  std::unordered_map<key_id, key_state, key_id_hash> keys_;
};

static_assert(ServerHandler<sync_sum>);

}  // namespace bps::server
