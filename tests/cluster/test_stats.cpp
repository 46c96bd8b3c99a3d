// Communicator::stats(): what a worker's operations took, as the trainer sees it.

#include <catch2/catch.hpp>
#include <numeric>

#include "cluster.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;

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
    BPS_EXPECT(s.partitions == rounds * (10 + 1), "rank {}: {} partitions", rank, s.partitions);
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
    BPS_EXPECT(s.queued_seconds >= 0 && s.sending_seconds >= 0 && s.answering_seconds > 0,
               "rank {}: stage means {} {} {}", rank, s.queued_seconds, s.sending_seconds,
               s.answering_seconds);
    // A call refused before it starts (another shape) does not count; an operation that fails
    // in flight is left out too (op_table::release_if_done), which this test does not reach.
    std::vector<float> wrong(3, 1.0f);
    auto text = test::message_of<usage_error>([&] { comm.push_pull("big", std::span(wrong)); });
    BPS_EXPECT(text.find("first used as") != std::string::npos, "message: {}", text);
    BPS_EXPECT(comm.stats().operations == 2 * rounds, "rank {}: the refused call counted", rank);
  });
}
