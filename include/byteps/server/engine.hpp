#pragma once
/// @file
/// `server::engine<H, Session>`: one of a server's engine threads (`BYTEPS_SERVER_ENGINE_THREAD`)
/// with what belongs to it alone: its own request handler `H` for the keys it owns, the shards of
/// the embedding tables whose keys it owns (`tables`), and who waits for which round of those
/// keys. Owning both per thread is why no lock guards a sum.
/// Also its stall report, which reads only its own waiting rooms.
///
/// @par Thread Safety
/// `mu` guards `handler`, `tables` and `waiting`: the engine thread holds it for each posted task; an I/O
/// thread that handles a small push inline, and the throughput report, take it too.

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/detail/task_queue.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/names.hpp"
#include "byteps/server/stats.hpp"
#include "byteps/server/tables.hpp"
#include "byteps/server/waiting.hpp"

namespace bps::server {

template <ServerHandler H, class Session>
struct engine {
  engine(const Config& cfg, detail::buffer_pool& pool) : handler(cfg, pool) {}

  std::mutex mu;
  H handler;
  server::tables tables;
  waiting_rooms<Session> waiting;
  /// Elastic training: the worker processes of the members this engine's handler sums over
  /// now, which its answers carry (`reply::contributors`); 0 until the first membership change.
  std::uint32_t contributors = 0;
  detail::task_thread thread;  // last: joins before the rest is destroyed

  /// Runs `task` on the engine thread, holding `mu`.
  template <class F>
  void post(F task) {
    thread.post([this, task = std::move(task)]() mutable {
      std::lock_guard lock(mu);
      task();
    });
  }

  /// On the engine thread. Like Horovod's stall inspector: names the workers a round has waited
  /// for longer than BYTEPS_STALL_WARNING_MS, once per round (at most 10 lines, then a count),
  /// so a slow job says why.
  void report_stalls(const Config& cfg, const tensor_names& names, logger& log) {
    const auto now = std::chrono::steady_clock::now();
    int reported = 0, more = 0;
    waiting.for_each_waiting([&](const key_id& id, typename waiting_rooms<Session>::room& r) {
      if (r.stall_reported || now - r.started < cfg.stall_warning) return;
      r.stall_reported = true;
      if (reported++ >= 10) {
        ++more;
        return;
      }
      auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - r.started);
      std::string missing;
      for (int w : waiting_rooms<Session>::missing(r, cfg.num_workers))
        missing += (missing.empty() ? "" : ", ") + std::to_string(w);
      log.warn(
          "stalled: {} partition {} round {} has waited {} s for worker(s) {} to push it "
          "({} of {} pushed)",
          names.quoted(id.key), id.part, r.round, waited.count(),
          missing, r.workers.size(),
          cfg.num_workers);
    });
    if (more > 0) log.warn("stalled: {} more partitions are waiting the same way", more);
  }
};

/// The periodic INFO line (BYTEPS_SERVER_LOG_INTERVAL_MS), and a last one at shutdown (`last`)
/// for the rest of the last interval: `stats`' throughput and, from every engine's waiting
/// rooms, the workers behind; with embedding tables, the rows and bytes this server holds. An idle interval with nobody behind says nothing.
template <class Engines>
void report_throughput(Engines& engines, int num_workers, throughput& stats, logger& log,
                       bool last) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<worker_lag> lag(static_cast<std::size_t>(num_workers));
  std::size_t shards = 0, rows = 0, table_bytes = 0;
  for (auto& e : engines) {
    std::lock_guard lock(e->mu);
    // at shutdown the engines are stopped and nobody waits any more
    if (!last) e->waiting.add_lag(now, num_workers, lag);
    shards += e->tables.count();
    rows += e->tables.rows_held();
    table_bytes += e->tables.bytes();
  }
  const auto i = stats.take(now);
  const bool behind =
      std::any_of(lag.begin(), lag.end(), [](const auto& l) { return l.partitions > 0; });
  if (i.bytes_in == 0 && i.bytes_out == 0 && i.rounds == 0 && !behind) return;
  if (shards == 0) return log.info("{}", report_line(i, lag));
  log.info("{}; embedding tables: {} shard{}, {} rows, {:.3f} MB with optimizer state",
           report_line(i, lag), shards, shards == 1 ? "" : "s", rows,
           static_cast<double>(table_bytes) / 1e6);
}

}  // namespace bps::server
