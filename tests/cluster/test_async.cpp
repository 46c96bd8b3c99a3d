#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "async_exact.hpp"
#include "cluster.hpp"
#include "faulty_cluster.hpp"

// Asynchronous training (BYTEPS_ENABLE_ASYNC=1, server/async_sum.hpp) in real in-process
// clusters: with integer dtypes the final parameters are the initial ones plus every delta
// pushed, exactly, over plain TCP and under random delays; bounded staleness keeps a fast worker
// within s pushes of a slow one (and without a bound it runs ahead); a node whose mode differs is
// refused at rendezvous; average and broadcast are refused.

using namespace bps;
using namespace std::chrono_literals;
using test::basic_cluster;
using test::basic_faulty_cluster;
using test::exact_worker;
using transport::fault;
using transport::fault_plan;
using transport::fault_rule;

namespace {

using async_cluster = basic_cluster<server::async_sum>;
using async_faulty_cluster = basic_faulty_cluster<server::async_sum>;

Config async_config(int workers, int servers, std::int64_t staleness = -1) {
  auto c = test::base_config(workers, servers);
  c.enable_async = true;
  c.async_staleness = staleness;
  c.partition_bytes = 4096;  // "big" is 5 partitions of int32 and 3 of int64 over both servers
  return c;
}

}  // namespace

TEST_CASE("async: final parameters are the initial ones plus every delta pushed, exactly",
          "[cluster][async]") {
  for (int workers : {1, 2, 3}) {
    CAPTURE(workers);
    async_cluster c(async_config(workers, 2));
    c.run_workers([&](test::comm_t& comm, int rank) { exact_worker(comm, rank, workers); });
  }
}

TEST_CASE("async: one operation record per push_pull and one per partition", "[cluster][async]") {
  const auto cfg = async_config(2, 2);
  async_cluster c(cfg);
  c.run_workers([&](test::comm_t& comm, int rank) {
    exact_worker(comm, rank, 2);
    // exact_worker: the initial push_pull of each tensor, `async_rounds` deltas, one final read.
    const std::uint64_t ops_per_tensor = test::async_rounds + 2;
    const partition::by_bytes p(cfg);
    const std::uint64_t parts_per_round =
        p.split(test::big_count * sizeof(std::int32_t), sizeof(std::int32_t)).size() +
        p.split(test::small_count * sizeof(std::int64_t), sizeof(std::int64_t)).size();
    const auto st = comm.stats();
    BPS_EXPECT(st.operation_records == 2 * ops_per_tensor,
               "rank {}: {} operation records for {} push_pulls", rank, st.operation_records,
               2 * ops_per_tensor);
    BPS_EXPECT(st.partition_records == ops_per_tensor * parts_per_round,
               "rank {}: {} partition records for {} partitions", rank, st.partition_records,
               ops_per_tensor * parts_per_round);
  });
}

TEST_CASE("async: exact under random delays of pushes and answers (faulty transport)",
          "[cluster][async][fault-injection]") {
  for (int workers : {1, 2, 3}) {
    CAPTURE(workers);
    auto plan = test::random_delays();
    async_faulty_cluster c(async_config(workers, 2), plan);
    c.run_workers([&](test::faulty_comm_t& comm, int rank) { exact_worker(comm, rank, workers); });
  }
}

namespace {

// Staleness, seen through the parameters: worker w's delta is 1 at element w, so element u of
// any answer is how many of worker u's deltas the servers had applied. Worker 1's pushes are
// delayed 25 ms each; worker 0 pushes as fast as it can. Returns the largest lead of worker 0
// over worker 1 in worker 0's answers.
std::int64_t fast_and_slow(std::int64_t staleness, int steps) {
  auto plan = std::make_shared<fault_plan>();
  plan->add({.when = {.type = wire::msg::push, .sender = 1u},
             .action = fault::delay(25ms),
             .times = fault_rule::always});
  auto cfg = async_config(2, 1, staleness);
  std::int64_t lead = 0;
  async_faulty_cluster c(cfg, plan);
  c.run_workers([&](test::faulty_comm_t& comm, int rank) {
    std::vector<std::int64_t> v(2, 0);
    comm.push_pull("counts", std::span(v)).wait();  // the seed: rank 0's zeros
    for (int r = 1; r <= steps; ++r) {
      v = {0, 0};
      v[static_cast<std::size_t>(rank)] = 1;
      comm.push_pull("counts", std::span(v)).wait();
      const auto mine = v[static_cast<std::size_t>(rank)], theirs = v[1 - rank];
      BPS_EXPECT(mine == r, "rank {} round {}: its own count is {}", rank, r, mine);
      BPS_EXPECT(theirs <= steps, "rank {}: the other's count is {}", rank, theirs);
      if (rank == 0) {
        lead = std::max(lead, mine - theirs);
        if (staleness >= 0)
          BPS_EXPECT(mine - theirs <= staleness, "round {}: worker 0 is {} ahead of worker 1, "
                     "more than the bound {}", r, mine - theirs, staleness);
      }
    }
    comm.barrier();
    v = {0, 0};
    comm.push_pull("counts", std::span(v)).wait();
    BPS_EXPECT(v[0] == steps && v[1] == steps, "rank {}: final counts {} {}", rank, v[0], v[1]);
  });
  return lead;
}

}  // namespace

TEST_CASE("async: bounded staleness keeps a fast worker within s pushes of a slow one",
          "[cluster][async][staleness]") {
  for (std::int64_t s : {0, 2}) {
    CAPTURE(s);
    // The bound binds: the fast worker reaches exactly s ahead, never more.
    CHECK(fast_and_slow(s, 10) == s);
  }
}

TEST_CASE("async: without a staleness bound a straggler holds nobody back",
          "[cluster][async][staleness]") {
  // Worker 0's 20 pushes take well under a millisecond each; worker 1's each wait 25 ms on the
  // way, so worker 0 finishes while worker 1 has applied at most a few.
  CHECK(fast_and_slow(-1, 20) >= 15);
}

TEST_CASE("async: a node whose mode differs is refused at rendezvous, naming BYTEPS_ENABLE_ASYNC",
          "[cluster][async]") {
  auto cfg = async_config(1, 1);
  cfg.rendezvous_timeout = 2s;
  async_cluster c(cfg);
  auto wc = c.worker_config(0);
  wc.enable_async = false;
  const auto msg = test::message_of<usage_error>([&] { test::comm_t comm(wc); });
  CHECK(msg.find("the scheduler refused this node") != std::string::npos);
  CHECK(msg.find("BYTEPS_ENABLE_ASYNC differs: the worker at") != std::string::npos);
  CHECK(msg.find("has 0 or unset (synchronous), the scheduler has 1 (asynchronous)") !=
        std::string::npos);
  wc.enable_async = true;
  wc.async_staleness = 3;
  const auto bound = test::message_of<usage_error>([&] { test::comm_t comm(wc); });
  CHECK(bound.find("BYTEPS_ASYNC_STALENESS differs") != std::string::npos);
  c.join();  // the job then times out without its worker
}

TEST_CASE("async: a synchronous server refuses to run in async mode", "[cluster][async]") {
  auto cfg = async_config(1, 1);
  cfg.node_role = role::server;
  const auto msg = test::message_of<usage_error>([&] { Server<transport::tcp> s(cfg); });
  CHECK(msg.find("BYTEPS_ENABLE_ASYNC=1, but this server sums synchronously") != std::string::npos);
}

TEST_CASE("async: average and broadcast are refused, saying why", "[cluster][async]") {
  async_cluster c(async_config(1, 1));
  c.run_workers([](test::comm_t& comm, int) {
    std::vector<float> v(4, 1.0f);
    const auto avg = test::message_of<usage_error>(
        [&] { comm.push_pull("w", std::span(v), {.average = true}).wait(); });
    BPS_EXPECT(avg.find("push_pull of 'w': average is not defined in async mode") !=
                   std::string::npos,
               "{}", avg);
    const auto bc = test::message_of<usage_error>([&] { comm.broadcast("w", std::span(v), 0); });
    BPS_EXPECT(bc.find("broadcast of 'w': not available in async mode") != std::string::npos,
               "{}", bc);
    comm.push_pull("w", std::span(v)).wait();  // the communicator still works
    BPS_EXPECT(v[0] == 1.0f, "{}", v[0]);
  });
}
