#pragma once
/// @file
/// `server::async_sum`: the `ServerHandler` of asynchronous training (`BYTEPS_ENABLE_ASYNC=1`).
/// The server holds each partition's parameters; a worker pushes a delta and is answered at once
/// with the parameters as they are after it, without waiting for the other workers.
///
/// Per partition key:
/// - **Seed (round 0).** A worker's first push of a tensor is round 0. Rank 0's round-0 push
///   becomes the parameters as they are (not added to zeros): every worker starts from rank 0's
///   initial values. Another worker's round-0 push waits until rank 0's has come, and gets the
///   seeded parameters; its bytes are not used. After the seed, a round-0 push is answered at
///   once with the current parameters.
/// - **Deltas (round r >= 1).** Worker w's push of round r is added into the parameters (integers
///   wrap; fp16 and bf16 are kept in an fp32 master copy, so rounding happens once per answer and
///   does not accumulate), the key's version (deltas applied) goes up by one, and w is answered
///   with a copy of the parameters (`reply::keep`: other pushes change them while it is sent).
///   A worker's rounds must come in order (0, 1, 2, ...), as `push_pull` sends them.
/// - **Bounded staleness** (`Config::async_staleness` = s >= 0). `pushes(w)` counts the deltas
///   of w applied. A push that leaves w more than s deltas ahead of the slowest worker (one that
///   has not pushed counts 0) is applied but not answered: w is held in the key's waiting list,
///   so it cannot push again. Each push that raises the slowest count answers, each with its
///   own round (`outcome::release_each`), the held workers no longer more than s ahead. So a
///   worker's completed push_pulls are never more than s ahead of any worker's pushes, and a
///   straggler holds back only the workers that ran s ahead of it. A held worker waits within
///   its operation's deadline (`BYTEPS_OP_TIMEOUT_MS`), and the server's stall report names the
///   workers its room waits for. s = -1 (the default, as in BytePS): nobody is ever held.
///
/// - **Failover** (`Config::failover()`). Every answer also carries each worker's count of
///   deltas the parameters hold (wire::flag_applied), and a worker keeps its last answer. When a
///   server dies, each worker offers its last answer to the replacement (`sum_offer`) before it
///   re-pushes the delta in flight; the replacement takes the offer that holds the most deltas,
///   and applies exactly the re-pushed deltas that offer does not hold, however the offers and
///   pushes of different workers interleave (server/async_key.hpp says why that is enough). A
///   re-joining worker's first push to the replacement may so be of any round up to its next.

#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/server/async_key.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

class async_sum {
 public:
  /// @throws usage_error when `cfg` is not in async mode: workers would get parameters where
  /// they expect sums.
  /// Landed pushes (RDMA): each is read during `handle` only (added to the parameters, or
  /// dropped while the key waits for its seed), so the landing buffer is free again before the
  /// worker's answer.
  static constexpr bool reads_in_place = true;

  async_sum(const Config& cfg, detail::buffer_pool&) : staleness_(cfg.async_staleness) {
    check_config(cfg);
  }

  /// @throws usage_error when `cfg` is not in async mode (see the constructor).
  static void check_config(const Config& cfg) {
    if (!cfg.enable_async)
      throw usage_error(
          "server::async_sum needs BYTEPS_ENABLE_ASYNC=1 on every node: without "
          "it workers expect sums, not parameters");
  }

  outcome handle(const request& r) {
    const wire::header& h = r.head;
    const bool offer = h.type == wire::msg::sum_offer;
    if (h.type != wire::msg::push && !(offer && r.failover))
      return outcome::refuse(fmt::format("async mode takes pushes only, not a {} of {}",
                                         wire::msg_name(h.type), r.tensor_name()));
    auto& k = keys_[key_id{h.key, h.part}];
    if (auto bad = check(k, h, r); !bad.empty()) return outcome::refuse(std::move(bad));
    if (offer) return take_offer(k, r);
    const auto w = static_cast<std::size_t>(r.worker);
    const bool rejoined = !k.started[w] && h.round > 0;  // failover: its first push here
    k.started[w] = true;
    k.hear(r.worker);
    if (!k.seeded) {
      if (r.worker != 0) return outcome::wait();  // waits for the seed (or an offer)
      k.seeded = true;
      reduce::accumulate_init(k.master.data(), r.whole().data(), k.count(), k.type);
      return outcome::release(snapshot(k, 0));  // rank 0 and everyone who waited for the seed
    }
    if (h.round == 0) return outcome::answer_now(snapshot(k, 0));
    if (h.round <= k.pushes[w])  // a re-push the replacement's parameters already hold
      return outcome::answer_now(snapshot(k, h.round));
    const std::uint64_t slowest_before = k.slowest();
    k.apply(r.worker, h.round, r.whole().data(), rejoined);
    if (staleness_ >= 0 && k.pushes[w] - k.slowest() > static_cast<std::uint64_t>(staleness_)) {
      k.held[w] = h.round;
      return outcome::wait();
    }
    return answer_and_release(k, snapshot(k, h.round), slowest_before);
  }

  /// Deltas applied to partition `part` of tensor `key` (0 before and at the seed); nullopt for
  /// a partition never pushed. For tests and tools.
  std::optional<std::uint64_t> version(std::uint64_t key, std::uint32_t part) const {
    auto it = keys_.find(key_id{key, part});
    if (it == keys_.end() || !it->second.shaped) return std::nullopt;
    return it->second.version;
  }

 private:
  using key = async_key;

  // What is wrong with this push or offer, for its worker alone; "" when it may be taken. The
  // first push or offer ever fixes the key's shape, as in synchronous mode.
  static std::string check(key& k, const wire::header& h, const request& r) {
    const auto t = dtype_from_wire(h.dtype);
    const bool offer = h.type == wire::msg::sum_offer;
    const std::uint64_t counts = offer ? wire::applied_counts_bytes(r.num_workers) : 0;
    if (!t) return fmt::format("unknown dtype value {} for {}", h.dtype, r.tensor_name());
    if (offer && ((h.flags & wire::flag_applied) == 0 || r.whole().size() < counts))
      return fmt::format(
          "a sum_offer of {} partition {} without the {} bytes of applied counts "
          "that async mode's offers end with",
          r.tensor_name(), h.part, counts);
    const std::size_t size = r.whole().size() - counts;
    if (size % dtype_size(*t) != 0)
      return fmt::format("a partition of {} has {} bytes, not a whole number of {} elements",
                         r.tensor_name(), size, dtype_name(*t));
    if (r.worker < 0 || r.worker >= r.num_workers)
      return fmt::format("push from unknown worker {}", r.worker);
    if (!k.shaped) {
      k.shape(*t, h, size, r.worker, r.num_workers, r.failover);
    } else if (*t != k.type || h.tensor_bytes != k.tensor_bytes || h.offset != k.offset ||
               size != k.bytes) {
      return fmt::format(
          "tensor {} has different shapes on different workers: worker {} pushed {} x {}, "
          "worker {} pushed {} x {}; every worker must push_pull the same number of elements "
          "and dtype under one name",
          r.tensor_name(), k.first_worker, k.tensor_bytes / dtype_size(k.type), dtype_name(k.type),
          r.worker, h.tensor_bytes / dtype_size(*t), dtype_name(*t));
    }
    const auto w = static_cast<std::size_t>(r.worker);
    if (offer)
      return k.started[w] ? fmt::format(
                                "worker {} offered {} partition {} after it pushed it "
                                "here; a worker offers before it pushes",
                                r.worker, r.tensor_name(), h.part)
                          : std::string{};
    // A worker re-joining a replacement (failover) may push any round up to its next one:
    // the round in flight when the old server died, or the next after the answer it offered.
    if (r.failover && !k.started[w] && h.round > 0) {
      if (k.seeded && h.round <= k.pushes[w] + 1) return {};
      return fmt::format(
          "worker {} pushed round {} of {} partition {} as its first push to this "
          "server, but {}; after a failover a worker offers its last answer "
          "before it pushes again",
          r.worker, h.round, r.tensor_name(), h.part,
          k.seeded ? fmt::format("the parameters hold its rounds up to {} only", k.pushes[w])
                   : std::string("no parameters came yet"));
    }
    const std::uint64_t expected = k.started[w] ? k.pushes[w] + 1 : 0;
    if (h.round != expected)
      return fmt::format(
          "worker {} pushed round {} of {} partition {}, but its next round is {}; "
          "in async mode each worker's push_pulls of a tensor count 0, 1, 2, ...",
          r.worker, h.round, r.tensor_name(), h.part, expected);
    return {};
  }

  // Failover: worker r.worker's last answer from a server that died since. The offer that holds
  // the most deltas becomes the parameters (with the deltas applied here that it lacks). If the
  // key was not seeded, its waiting workers get the parameters now; if the offer raised the
  // slowest count, held workers it frees are answered.
  outcome take_offer(key& k, const request& r) {
    const auto n = static_cast<std::size_t>(r.num_workers);
    const std::byte* params = r.whole().data();
    std::vector<std::uint64_t> counts(n);
    for (std::size_t w = 0; w < n; ++w)
      counts[w] = wire::detail::get_le<std::uint64_t>(params + k.bytes + 8 * w);
    if (counts[static_cast<std::size_t>(r.worker)] != r.head.round)
      return outcome::refuse(fmt::format(
          "worker {}'s sum_offer of {} partition {} is of round {}, but its counts say the "
          "parameters hold {} of its deltas",
          r.worker, r.tensor_name(), r.head.part, r.head.round,
          counts[static_cast<std::size_t>(r.worker)]));
    const bool was_seeded = k.seeded;
    const std::uint64_t slowest_before = k.slowest();
    const bool taken = k.rebase(params, counts);
    k.hear(r.worker);
    if (!taken) return outcome::taken();
    if (!was_seeded) {
      const bool waiting = std::find(k.started.begin(), k.started.end(), true) != k.started.end();
      return waiting ? outcome::release(snapshot(k, 0)) : outcome::taken();
    }
    outcome o = answer_and_release(k, {}, slowest_before);
    return o.what == outcome::kind::release_each ? o : outcome::taken();
  }

  // The pusher's answer `now` and, when the slowest count rose past `slowest_before` under a
  // staleness bound, each held worker no longer more than s ahead, with the same bytes and its
  // own round. From an offer, `now` is not sent (its worker is answered already).
  outcome answer_and_release(key& k, reply now, std::uint64_t slowest_before) {
    const std::uint64_t slowest = k.slowest();
    if (staleness_ < 0 || slowest == slowest_before) return outcome::answer_now(std::move(now));
    std::vector<held_answer> released;
    reply shared = now.bytes.empty() ? snapshot(k, 0) : now;
    for (std::size_t u = 0; u < k.held.size(); ++u) {
      if (k.held[u] == 0 || k.pushes[u] - slowest > static_cast<std::uint64_t>(staleness_))
        continue;
      reply mine = shared;  // the same bytes, its own round
      mine.round = k.held[u];
      released.push_back({static_cast<int>(u), std::move(mine)});
      k.held[u] = 0;
    }
    if (released.empty()) return outcome::answer_now(std::move(now));
    return outcome::release_each(std::move(now), std::move(released));
  }

  // A copy of the parameters in the tensor's dtype, owned by the reply; with failover, followed
  // by each worker's count of deltas they hold (wire::flag_applied).
  static reply snapshot(const key& k, std::uint64_t round) {
    const std::size_t counts = k.failover ? 8 * k.pushes.size() : 0;
    auto copy = std::make_shared_for_overwrite<std::byte[]>(k.bytes + counts);
    reduce::accumulate_finish(copy.get(), k.master.data(), k.count(), k.type);
    for (std::size_t w = 0; w < counts / 8; ++w)
      wire::detail::put_le<std::uint64_t>(copy.get() + k.bytes + 8 * w, k.pushes[w]);
    reply r{std::span<const std::byte>(copy.get(), k.bytes + counts),
            round,
            k.type,
            k.offset,
            k.tensor_bytes,
            std::shared_ptr<const void>(copy, copy.get())};
    r.applied_counts = counts > 0;
    return r;
  }

  std::int64_t staleness_;
  std::unordered_map<key_id, key, key_id_hash> keys_;
};

static_assert(ServerHandler<async_sum>);

}  // namespace bps::server
