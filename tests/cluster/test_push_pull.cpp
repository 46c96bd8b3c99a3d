#include "cluster.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;

TEST_CASE("1 worker x 1 server: push_pull returns the input", "[cluster]") {
  cluster c(test::base_config(1, 1));
  c.run_workers([](comm_t& comm, int) {
    std::vector<float> v(1000);
    std::iota(v.begin(), v.end(), 0.0f);
    comm.push_pull("x", std::span(v)).wait();
    for (int i = 0; i < 1000; ++i) REQUIRE(v[i] == static_cast<float>(i));
  });
}

TEST_CASE("2 workers x 2 servers: sums fp32 over many partitions for 20 rounds", "[cluster]") {
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 4096;
  cluster c(cfg);
  c.run_workers([](comm_t& comm, int rank) {
    const std::size_t n = 12345;
    std::vector<float> v(n);
    for (int round = 0; round < 20; ++round) {
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i % 97) + rank * 1000 + round);
      comm.push_pull("grad", std::span(v), {.priority = 1}).wait();
      for (std::size_t i = 0; i < n; ++i)
        REQUIRE(v[i] == static_cast<float>(2 * (i % 97) + 1000 + 2 * round));
    }
  });
}
