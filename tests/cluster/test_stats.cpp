// Communicator::stats(): what a worker's operations took, as the trainer sees it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "faulty_cluster.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;
using Catch::Contains;

TEST_CASE("stats: operations and bytes and partitions and bytes per server match what was pushed",
          "[cluster][stats]") {
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 4096;
  cluster c(cfg);
  c.run_workers([&](comm_t& comm, int rank) {
    constexpr int rounds = 5;
    std::vector<float> big(10000, 1.0f), small(10, 1.0f);  // 40000 bytes: 10 partitions; 1
    for (int r = 0; r < rounds; ++r) {
      auto h1 = comm.push_pull("big", std::span(big));
      auto h2 = comm.push_pull("small", std::span(small));
      h1.wait();
      h2.wait();
    }
    auto s = comm.stats();
    const std::uint64_t big_bytes = big.size() * 4, small_bytes = small.size() * 4;
    BPS_EXPECT(s.operations == 2 * rounds, "rank {}: {} operations", rank, s.operations);
    BPS_EXPECT(s.bytes == rounds * (big_bytes + small_bytes), "rank {}: {} bytes", rank, s.bytes);
    for (auto st : {stage::queue, stage::push, stage::pull})
      BPS_EXPECT(s.stages[st].partitions == rounds * (10 + 1), "rank {}: {} partitions in {}",
                 rank, s.stages[st].partitions, stage_name(st));
    for (auto st : {stage::local_reduce, stage::copy_out, stage::encode, stage::decode,
                    stage::copy_in, stage::local_gather})
      BPS_EXPECT(s.stages[st].partitions == 0, "rank {}: {} partitions in {} (local::none)", rank,
                 s.stages[st].partitions, stage_name(st));
    BPS_EXPECT(s.in_flight == 0, "rank {}: {} in flight", rank, s.in_flight);
    BPS_EXPECT(s.busy_seconds > 0 && s.busy_seconds <= s.window_seconds + 1e-3,
               "rank {}: busy {} s of a {} s window", rank, s.busy_seconds, s.window_seconds);
    BPS_EXPECT(s.bytes_per_second() > 0, "rank {}: throughput {}", rank, s.bytes_per_second());
    BPS_EXPECT(s.bytes_per_server.size() == 2, "rank {}: {} servers", rank,
               s.bytes_per_server.size());
    const auto pushed =
        std::accumulate(s.bytes_per_server.begin(), s.bytes_per_server.end(), std::uint64_t{0});
    BPS_EXPECT(pushed == s.bytes, "rank {}: {} bytes pushed to servers, {} push_pulled", rank,
               pushed, s.bytes);
    BPS_EXPECT(s.bytes_per_server[0] > 0 && s.bytes_per_server[1] > 0,
               "rank {}: a server got nothing", rank);
    BPS_EXPECT(s.tensors.size() == 2 && s.tensors[0].name == "big" &&
                   s.tensors[0].bytes == rounds * big_bytes && s.tensors[0].operations == rounds,
               "rank {}: tensors {}", rank, s.tensors.size());
    BPS_EXPECT(s.mean_seconds(stage::queue) >= 0 && s.mean_seconds(stage::push) >= 0 &&
                   s.mean_seconds(stage::pull) > 0,
               "rank {}: stage means {} {} {}", rank, s.mean_seconds(stage::queue),
               s.mean_seconds(stage::push), s.mean_seconds(stage::pull));
    // A call refused before it starts (another shape) does not count. Operations that fail in
    // flight (op_table::release_if_done) are the next two tests'.
    std::vector<float> wrong(3, 1.0f);
    auto text = test::message_of<usage_error>([&] { comm.push_pull("big", std::span(wrong)); });
    BPS_EXPECT(text.find("first used as") != std::string::npos, "message: {}", text);
    BPS_EXPECT(comm.stats().operations == 2 * rounds, "rank {}: the refused call counted", rank);
  });
}

TEST_CASE("stats: an operation that fails at its deadline adds nothing to the totals",
          "[cluster][stats][fault-injection]") {
  // Only partition 0 of 'doomed' is lost, so the failed operation had answered partitions and
  // stage times of its own when it failed: the totals must still hold none of them. The other
  // tensor's operations run and finish while 'doomed' is in flight.
  auto plan = std::make_shared<transport::fault_plan>();
  const auto dropped = plan->add({.when = {.type = wire::msg::push,
                                           .from = role::worker,
                                           .key = tensor_key("doomed"),
                                           .part = 0},
                                  .action = transport::fault::drop()});
  auto cfg = test::base_config(1, 1);
  cfg.partition_bytes = 4096;
  cfg.op_timeout = std::chrono::milliseconds(2000);  // well inside the stats' 10 s window
  cfg.fusion_bytes = 0;  // the rule matches a push frame, not a record of a push_batch
  test::faulty_cluster c(cfg, plan);
  constexpr std::uint64_t rounds = 3;
  constexpr std::size_t count = 4096;
  constexpr std::uint64_t tensor_bytes = count * sizeof(float);  // 4 partitions
  comm_stats during, after;
  std::string error;
  double finishing_span = 0;  // from the first call on 'ok' to the last one's end
  c.run_workers(
      [&](test::faulty_comm_t& comm, int) {
        std::vector<float> doomed(count, 1.0f), ok(count, 1.0f);
        auto lost = comm.push_pull("doomed", std::span(doomed));
        const auto start = std::chrono::steady_clock::now();
        for (std::uint64_t r = 0; r < rounds; ++r) comm.push_pull("ok", std::span(ok)).wait();
        finishing_span = test::seconds_since(start);
        during = comm.stats();
        error = test::message_of<communicator_error>([&] { lost.wait(); });
        after = comm.stats();
      },
      /*strict=*/false);  // the dead communicator leaves without a bye: the server complains

  CHECK(plan->fired(dropped) == 1);
  // One partition still awaited: the other three of 'doomed' were answered.
  CHECK_THAT(error, Contains("push_pull of 'doomed'") && Contains("2000 ms") &&
                        Contains("1 partition(s) from server 0"));
  CHECK(during.in_flight == 1);
  CHECK(during.operations == rounds);

  CHECK(after.in_flight == 0);
  CHECK(after.operations == rounds);
  CHECK(after.bytes == rounds * tensor_bytes);
  CHECK(after.stages[stage::pull].partitions == rounds * 4);
  REQUIRE(after.tensors.size() == 1);
  CHECK(after.tensors[0].name == "ok");
  CHECK(after.tensors[0].operations == rounds);
  CHECK(after.tensors[0].bytes == rounds * tensor_bytes);
  // 'doomed' was in flight for 2 s; counted, it alone would make the busy time that long.
  CHECK(after.busy_seconds > 0);
  CHECK(after.busy_seconds <= finishing_span);
  // Bytes per server count what was pushed, the failed operation's four partitions included.
  CHECK(after.bytes_per_server == std::vector<std::uint64_t>{(rounds + 1) * tensor_bytes});
}

TEST_CASE("stats: an operation the server refuses in flight adds nothing and later ones count",
          "[cluster][stats]") {
  // The workers push 'w' with different shapes: each call passes the worker's own checks, and
  // the server fails the round. The communicator lives on, so operations after it count.
  cluster c(test::base_config(2, 1));
  constexpr std::uint64_t before = 2, after = 3;
  constexpr std::uint64_t ok_bytes = 10 * sizeof(float);
  comm_stats stats[2];
  std::string errors[2];
  float sums[2] = {};
  c.run_workers([&](comm_t& comm, int rank) {
    std::vector<float> ok(10, 1.0f), w(rank == 0 ? 10 : 20, 1.0f);
    for (std::uint64_t r = 0; r < before; ++r) comm.push_pull("ok", std::span(ok)).wait();
    errors[rank] = test::message_of<usage_error>([&] { comm.push_pull("w", std::span(w)).wait(); });
    for (std::uint64_t r = 0; r < after; ++r) {
      std::fill(ok.begin(), ok.end(), 1.0f);
      comm.push_pull("ok", std::span(ok)).wait();
    }
    sums[rank] = ok[0];
    stats[rank] = comm.stats();
  });
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    CHECK_THAT(errors[rank],
               Contains("'w'") && Contains("10 x float32") && Contains("20 x float32"));
    CHECK(sums[rank] == 2.0f);
    const auto& s = stats[rank];
    CHECK(s.in_flight == 0);
    CHECK(s.operations == before + after);
    CHECK(s.bytes == (before + after) * ok_bytes);
    CHECK(s.stages[stage::pull].partitions == before + after);
    REQUIRE(s.tensors.size() == 1);
    CHECK(s.tensors[0].name == "ok");
    CHECK(s.tensors[0].operations == before + after);
    CHECK(s.tensors[0].bytes == (before + after) * ok_bytes);
  }
}
