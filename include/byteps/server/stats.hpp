#pragma once
/// @file
/// `server::throughput`: what a server moved since its last report, for the INFO line it logs
/// every `BYTEPS_SERVER_LOG_INTERVAL_MS` (`report_line`). An operator reads a slow job from it:
/// a server that moves little while a worker lags is waiting for that worker, not overloaded.
///
/// @par Thread Safety
/// `received`, `sent` and `round_done` may be called from any thread (relaxed counters);
/// `take` from one thread at a time.

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "byteps/core/linkage.hpp"
#include "byteps/server/waiting.hpp"

namespace bps::server {

class throughput {
 public:
  using clock = std::chrono::steady_clock;

  /// One report's numbers: payload bytes of pushes in and of answers out, and the rounds that
  /// a handler released (an answer to every waiting worker), over `seconds`.
  struct interval {
    double seconds = 0;
    std::uint64_t bytes_in = 0, bytes_out = 0, rounds = 0;
  };

  throughput() : since_(clock::now()) {}

  void received(std::size_t bytes) { in_.fetch_add(bytes, std::memory_order_relaxed); }
  void sent(std::size_t bytes) { out_.fetch_add(bytes, std::memory_order_relaxed); }
  void round_done() { rounds_.fetch_add(1, std::memory_order_relaxed); }

  /// Starts the current interval's clock at `now`, keeping what was counted (a server starts
  /// reporting once it joined: pushes may already have come, but the wait to join is no part of
  /// its throughput).
  void restart_clock(clock::time_point now = clock::now()) { since_ = now; }

  /// The numbers since the previous `take` (or construction), which start over.
  interval take(clock::time_point now = clock::now()) {
    interval i;
    i.seconds = std::chrono::duration<double>(now - since_).count();
    since_ = now;
    i.bytes_in = in_.exchange(0, std::memory_order_relaxed);
    i.bytes_out = out_.exchange(0, std::memory_order_relaxed);
    i.rounds = rounds_.exchange(0, std::memory_order_relaxed);
    return i;
  }

 private:
  std::atomic<std::uint64_t> in_{0}, out_{0}, rounds_{0};
  clock::time_point since_;
};

/// The report, one line: `last 10.000 s: 40 rounds, in 12.345 MB/s, out 12.345 MB/s; behind:
/// worker 1 2.3 s on 4 partitions` (MB = 10^6 bytes). `lag` is indexed by worker; workers with
/// no missing push are left out, the longest waited-for first, at most 8 named.
BYTEPS_DECL std::string report_line(const throughput::interval& i,
                                    const std::vector<worker_lag>& lag);

}  // namespace bps::server

#if BYTEPS_INCLUDE_BODIES
#include "byteps/server/impl/stats.hpp"
#endif
