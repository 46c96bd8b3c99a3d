#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

constexpr int rounds = 12;
constexpr std::size_t big_count = 5000, small_count = 7;

// Worker `rank`'s initial values (only rank 0's become the parameters) and its delta of round
// `round` (>= 1). Large enough that int32 sums wrap.
template <class T>
T initial(int rank, std::size_t i) {
  return static_cast<T>(static_cast<std::int64_t>(i * 2654435761u) + rank * 1000003);
}
template <class T>
T delta(int rank, int round, std::size_t i) {
  const auto u = static_cast<std::uint64_t>(i + 1) * 0x9e3779b97f4a7c15ull +
                 static_cast<std::uint64_t>(rank * 131 + round) * 0xbf58476d1ce4e5b9ull;
  return static_cast<T>(u >> 7);
}
template <class T>
T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}

// The parameters at the end: rank 0's initial values plus every worker's every delta.
template <class T>
std::vector<T> expected_final(std::size_t n, int workers) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    T x = initial<T>(0, i);
    for (int w = 0; w < workers; ++w)
      for (int r = 1; r <= rounds; ++r) x = wrap_add(x, delta<T>(w, r, i));
    v[i] = x;
  }
  return v;
}

// One worker of the exact-sum run: the first push_pull of each tensor gives rank 0's initial
// values (a barrier after it, so that no delta is in yet: a worker whose first push_pull comes
// later gets the parameters as they are then); then `rounds` deltas; then, after a barrier
// (every delta is in), one zero-delta push_pull reads the final parameters.
template <class Comm>
void exact_worker(Comm& comm, int rank, int workers) {
  std::vector<std::int32_t> big(big_count);
  std::vector<std::int64_t> small(small_count);
  for (std::size_t i = 0; i < big_count; ++i) big[i] = initial<std::int32_t>(rank, i);
  for (std::size_t i = 0; i < small_count; ++i) small[i] = initial<std::int64_t>(rank, i);
  auto a = comm.push_pull("big", std::span(big));
  auto b = comm.push_pull("small", std::span(small));
  a.wait();
  b.wait();
  for (std::size_t i = 0; i < big_count; ++i)
    BPS_EXPECT(big[i] == initial<std::int32_t>(0, i), "rank {}: big[{}] = {} is not rank 0's",
               rank, i, big[i]);
  for (std::size_t i = 0; i < small_count; ++i)
    BPS_EXPECT(small[i] == initial<std::int64_t>(0, i), "rank {}: small[{}] is not rank 0's",
               rank, i);
  comm.barrier();
  for (int r = 1; r <= rounds; ++r) {
    for (std::size_t i = 0; i < big_count; ++i) big[i] = delta<std::int32_t>(rank, r, i);
    for (std::size_t i = 0; i < small_count; ++i) small[i] = delta<std::int64_t>(rank, r, i);
    a = comm.push_pull("big", std::span(big));
    b = comm.push_pull("small", std::span(small));
    a.wait();
    b.wait();
  }
  comm.barrier();
  std::fill(big.begin(), big.end(), 0);
  std::fill(small.begin(), small.end(), 0);
  a = comm.push_pull("big", std::span(big));
  b = comm.push_pull("small", std::span(small));
  a.wait();
  b.wait();
  const auto want_big = expected_final<std::int32_t>(big_count, workers);
  const auto want_small = expected_final<std::int64_t>(small_count, workers);
  for (std::size_t i = 0; i < big_count; ++i)
    BPS_EXPECT(big[i] == want_big[i], "rank {}: final big[{}] = {}, want {}", rank, i, big[i],
               want_big[i]);
  for (std::size_t i = 0; i < small_count; ++i)
    BPS_EXPECT(small[i] == want_small[i], "rank {}: final small[{}] = {}, want {}", rank, i,
               small[i], want_small[i]);
}

// Random delays of 0-8 ms on a third of the pushes and answers, from a fixed seed: frames of a
// link stay in order, but workers' pushes reach the servers in ever-changing interleavings.
std::shared_ptr<fault_plan> random_delays() {
  auto plan = std::make_shared<fault_plan>();
  auto state = std::make_shared<std::uint64_t>(0x5eed);
  auto coin = [state](const transport::outgoing_frame&) {  // under the plan's lock
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (*state >> 33) % 3 == 0;
  };
  for (auto ms : {1ms, 3ms, 8ms}) {
    for (auto type : {wire::msg::push, wire::msg::pull_response})
      plan->add({.when = {.type = type, .also = coin},
                 .action = fault::delay(ms),
                 .times = fault_rule::always});
  }
  return plan;
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

TEST_CASE("async: exact under random delays of pushes and answers (faulty transport)",
          "[cluster][async][fault-injection]") {
  for (int workers : {1, 2, 3}) {
    CAPTURE(workers);
    auto plan = random_delays();
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
