#pragma once
/// @file
/// `server::async_key`: one partition key of asynchronous training (server/async_sum.hpp): its
/// shape, its parameters, each worker's count of applied deltas and, with failover on, what a
/// replacement server needs to take the dead server's parameters over without losing or
/// doubling a delta (`rebase`).
///
/// Why the counts are enough. The dead server applied each worker's deltas in that worker's
/// round order, so every answer it sent held, for each worker w, exactly w's rounds 1 to some
/// count c[w]: the answer's `counts` (wire::flag_applied). Its answers held ever more deltas, so
/// of the offers that reach the replacement (each worker's last answer), the one with the largest
/// total holds all the others. A delta is either in some answer a worker got (so in that newest
/// offer) or not yet answered, so its worker pushes it again. Only a worker's first push to the
/// replacement can be such a re-push: its later rounds never reached the dead server. So the
/// replacement keeps that first delta apart (`uncertain`) and the sum of the later ones
/// (`since_base`), and when a newer offer comes the parameters become the offer, plus
/// `since_base`, plus each kept first delta the offer does not hold (its round > c[w]).
/// A worker's offers reach the server before its pushes, so once every worker was heard from
/// for a key no offer can come: the key stops keeping deltas apart.
///
/// Why nobody is answered before then. An answer is an offer to the next replacement, and the
/// newest offer must hold every delta any worker was answered for. A replacement that has not
/// heard from worker u lacks what u's last answer from the dead server holds, so an answer of
/// its own could count more deltas and still lack one of those; if the replacement then died,
/// that delta would be lost (u never pushes it again). So with failover every answer of a key
/// waits (`held`) until every worker was heard from; the first push of each worker does that on
/// a server that has had the key from the start.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "byteps/core/dtype.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/server/key_shape.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

/// Its shape is the first push's or offer's (of any worker).
struct async_key : key_shape {
  bool seeded = false;    // rank 0's round 0 or an offer came: `master` holds the parameters
  bool failover = false;  // answers carry the counts; offers may come
  std::vector<std::byte> master;      // the parameters; fp32 for fp16 and bf16
  std::uint64_t version = 0;          // deltas applied
  std::vector<bool> started;          // by worker: a push of it came here (its round 0, or a
                                      // re-joining worker's first push to a replacement)
  std::vector<std::uint64_t> pushes;  // by worker: its deltas the parameters hold (rounds 1..n)
  std::vector<std::optional<std::uint64_t>> held;  // by worker: the round its answer waits for

  // Failover only, while some worker has not been heard from (see the file comment).
  std::vector<bool> heard;  // by worker: an offer or a push of it came here
  std::size_t unheard = 0;
  std::uint64_t base_total = 0;       // the deltas in the offer `master` was rebased on
  std::vector<std::byte> since_base;  // accumulator: deltas applied here, but first ones
  struct first_delta {
    std::uint64_t round = 0;       // 0: none kept
    std::vector<std::byte> bytes;  // in the tensor's dtype
  };
  std::vector<first_delta> uncertain;  // by worker: its first delta here, if an offer may hold it

  std::uint64_t slowest() const noexcept { return *std::min_element(pushes.begin(), pushes.end()); }
  bool recovering() const noexcept { return unheard > 0; }

  void shape(dtype t, const wire::header& h, std::size_t size, int worker, int num_workers,
             bool with_failover) {
    capture(h, t, size, worker);
    master.assign(reduce::accumulator_bytes(type, count()), std::byte{0});
    const auto n = static_cast<std::size_t>(num_workers);
    started.assign(n, false);
    pushes.assign(n, 0);
    held.assign(n, std::nullopt);
    failover = with_failover;
    if (!failover) return;
    heard.assign(n, false);
    unheard = n;
    uncertain.resize(n);
  }

  /// Notes an offer or a push of `worker`. True when it was the last worker the key had not
  /// heard from: the key has just stopped recovering.
  bool hear(int worker) {
    const auto w = static_cast<std::size_t>(worker);
    if (heard.empty() || heard[w]) return false;
    heard[w] = true;
    if (--unheard > 0) return false;
    since_base = {};  // no offer can come any more: what rebase needs is not kept
    uncertain = {};
    return true;
  }

  /// Adds worker `worker`'s delta (in the tensor's dtype). `first`: its first push here, which
  /// an offer still to come may hold.
  void apply(int worker, std::uint64_t round, const std::byte* delta, bool first) {
    reduce::accumulate_add(master.data(), delta, count(), type);
    pushes[static_cast<std::size_t>(worker)] = round;
    ++version;
    if (!recovering()) return;
    if (first) {
      auto& u = uncertain[static_cast<std::size_t>(worker)];
      u.round = round;
      u.bytes.assign(delta, delta + bytes);
      return;
    }
    if (since_base.empty()) since_base.assign(master.size(), std::byte{0});
    reduce::accumulate_add(since_base.data(), delta, count(), type);  // widens fp16 and bf16
  }

  /// An offer of parameters `params` holding worker w's rounds 1..counts[w]: when it holds more
  /// deltas than the parameters were last based on (or nothing is seeded yet), the parameters
  /// become it plus every delta applied here that it does not hold; otherwise nothing changes.
  void rebase(const std::byte* params, std::span<const std::uint64_t> counts) {
    const std::uint64_t total = std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
    if (seeded && total <= base_total) return;
    reduce::accumulate_init(master.data(), params, count(), type);
    if (!since_base.empty())
      reduce::accumulate_add(master.data(), since_base.data(), count(), accumulator_type());
    for (std::size_t w = 0; w < uncertain.size(); ++w) {
      auto& u = uncertain[w];
      if (u.round == 0) continue;
      if (u.round <= counts[w]) {
        u = {};  // the dead server had applied it, and the offer holds it
        continue;
      }
      reduce::accumulate_add(master.data(), u.bytes.data(), count(), type);
    }
    for (std::size_t w = 0; w < pushes.size(); ++w) pushes[w] = std::max(pushes[w], counts[w]);
    version = std::accumulate(pushes.begin(), pushes.end(), std::uint64_t{0});
    base_total = total;
    seeded = true;
  }

 private:
  // The accumulator's own dtype, in which `since_base` is added back into `master`.
  dtype accumulator_type() const noexcept {
    return type == dtype::float16 || type == dtype::bfloat16 ? dtype::float32 : type;
  }
};

}  // namespace bps::server
