// Asynchronous training with server failover: a server dies while deltas are in flight, a
// standby takes its rank, every worker offers its last answer and re-pushes what was in flight,
// and the final parameters are still rank 0's initial values plus every delta exactly once
// (int32 and int64: a lost or doubled delta would show), with 2 and 3 workers, under random
// delays, with a staleness bound, and when the replacement itself dies later.
#include <atomic>
#include <catch2/catch.hpp>

#include "async_exact.hpp"
#include "failover_cluster.hpp"

using namespace bps;
using namespace std::chrono_literals;
using bps::test::exact_worker;
using bps::test::failover_cluster;
using bps::test::faulty_tcp;

namespace {

Config async_failover_config(int workers, std::int64_t staleness = -1) {
  auto c = test::base_config(workers, 2);
  c.enable_async = true;
  c.async_staleness = staleness;
  c.partition_bytes = 4096;  // "big" is 5 partitions of int32, "small" 1, over both servers
  c.failover_timeout = 10s;
  c.heartbeat_interval = 100ms;
  c.heartbeat_timeout = 2000ms;
  return c;
}

// Runs the exact-sum job; worker 0 kills the server holding rank kills[i].second right after
// issuing round kills[i].first's push_pulls (so they are in flight). Checks that each kill was
// replaced.
template <class Tr>
void run_with_kills(const Config& cfg, std::vector<std::pair<int, int>> kills,
                    std::shared_ptr<transport::fault_plan> plan = nullptr) {
  failover_cluster<Tr, server::async_sum> c(cfg, static_cast<int>(kills.size()), plan);
  const int workers = cfg.num_workers;
  c.run_workers([&](auto& comm, int rank) {
    exact_worker(comm, rank, workers, [&](int round) {
      if (rank != 0) return;
      for (const auto& [at, server] : kills)
        if (round == at) c.kill_server(server);
    });
  });
  CHECK(c.replacements() == static_cast<int>(kills.size()));
}

}  // namespace

TEST_CASE("async failover: a server killed with deltas in flight loses none and doubles none",
          "[cluster][async][failover]") {
  for (int workers : {2, 3}) {
    CAPTURE(workers);
    run_with_kills<transport::tcp>(async_failover_config(workers), {{5, 0}});
  }
}

TEST_CASE("async failover: exact under random delays of pushes and answers",
          "[cluster][async][failover][fault-injection]") {
  for (int kill_at : {2, 7}) {
    CAPTURE(kill_at);
    run_with_kills<faulty_tcp>(async_failover_config(3), {{kill_at, 1}}, test::random_delays());
  }
}

TEST_CASE("async failover: the replacement killed later is replaced from its own answers",
          "[cluster][async][failover]") {
  run_with_kills<transport::tcp>(async_failover_config(3), {{3, 0}, {8, 0}});
}

TEST_CASE("async failover: exact with a staleness bound", "[cluster][async][failover][staleness]") {
  run_with_kills<faulty_tcp>(async_failover_config(3, 1), {{6, 0}}, test::random_delays());
}
