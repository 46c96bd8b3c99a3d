// Mixed mode end to end: 2 machines with colocated servers plus 1 CPU-only server; sums exact.
// (The byte split itself is checked against the formula in tests/unit/test_placement.cpp.)
#include "cluster.hpp"
#include "values.hpp"

#include <catch2/catch.hpp>

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;

TEST_CASE("mixed mode: 2 machines + 1 CPU server - every dtype - exact sums", "[cluster][mixed]") {
  auto cfg = test::base_config(2, 3);
  cfg.mixed_mode = true;
  cfg.partition_bytes = 8192;
  cluster c(cfg);
  c.run_workers([](comm_t& comm, int rank) {
    for (int round = 0; round < 5; ++round) {
      for (dtype t : all_dtypes) {
        const std::size_t n = 30011;
        auto b = test::fill(t, n, rank, round);
        comm.push_pull(fmt::format("mixed.{}", dtype_name(t)), b.data(), n, t).wait();
        auto wrong = test::first_wrong(t, b, n, 2, round);
        BPS_EXPECT(wrong == n, "{} round {}: element {} is not the sum", dtype_name(t), round,
                   wrong);
      }
    }
  });
}

TEST_CASE("mixed mode set on only some nodes is refused at rendezvous", "[cluster][mixed]") {
  auto cfg = test::base_config(1, 2);
  cfg.mixed_mode = true;
  cfg.rendezvous_timeout = std::chrono::seconds(2);  // the refusal comes at the hello
  cluster c(cfg);
  auto wc = c.worker_config(0);
  wc.mixed_mode = false;
  const auto msg = test::message_of<usage_error>([&] { comm_t comm(wc); });
  CHECK(msg.find("BYTEPS_ENABLE_MIXED_MODE differs") != std::string::npos);
  // the job then times out without its worker
  c.join();
}
