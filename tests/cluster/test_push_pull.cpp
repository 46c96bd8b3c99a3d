#include "cluster.hpp"
#include "short_schedule.hpp"
#include "values.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>  // fmt::join

#include <cmath>
#include <numeric>

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;

namespace {

// Every dtype at sizes from 1 element to several partitions (odd sizes included), 20 rounds;
// each round's result must equal the reference sum exactly on every worker.
void every_dtype_every_size(int workers, int servers) {
  auto cfg = test::base_config(workers, servers);
  cfg.partition_bytes = 8192;  // many partitions per tensor, spread over every server
  cluster c(cfg);
  const std::size_t sizes[] = {1, 2, 3, 7, 1023, 2049, 4097, 20011};
  c.run_workers([&](comm_t& comm, int rank) {
    for (int round = 0; round < 20; ++round) {
      std::vector<std::vector<std::byte>> buffers;
      std::vector<handle> handles;
      std::vector<std::pair<dtype, std::size_t>> what;
      for (dtype t : all_dtypes) {
        for (std::size_t n : sizes) {
          buffers.push_back(test::fill(t, n, rank, round));
          what.emplace_back(t, n);
        }
      }
      // All in flight at once, as a backward pass would issue them.
      for (std::size_t k = 0; k < buffers.size(); ++k) {
        auto [t, n] = what[k];
        auto name = fmt::format("{}.{}", dtype_name(t), n);
        handles.push_back(comm.push_pull(name, buffers[k].data(), n, t,
                                         {.priority = static_cast<int>(k % 5)}));
      }
      for (std::size_t k = 0; k < buffers.size(); ++k) {
        handles[k].wait();
        auto [t, n] = what[k];
        auto wrong = test::first_wrong(t, buffers[k], n, workers, round);
        BPS_EXPECT(wrong == n, "{} x {} round {} rank {}: element {} is not the sum", dtype_name(t),
                   n, round, rank, wrong);
      }
    }
  });
}

}  // namespace

TEST_CASE("1 worker x 1 server: push_pull returns the input", "[cluster]") {
  cluster c(test::base_config(1, 1));
  c.run_workers([](comm_t& comm, int) {
    std::vector<float> v(1000);
    std::iota(v.begin(), v.end(), 0.0f);
    comm.push_pull("x", std::span(v)).wait();
    for (int i = 0; i < 1000; ++i) BPS_EXPECT(v[i] == static_cast<float>(i), "element {}", i);
  });
}

TEST_CASE("1 worker x 1 server: every dtype - odd sizes - 20 rounds", "[cluster]") {
  every_dtype_every_size(1, 1);
}

TEST_CASE("2 workers x 2 servers: every dtype - odd sizes - 20 rounds", "[cluster]") {
  every_dtype_every_size(2, 2);
}

TEST_CASE("3 workers x 2 servers: every dtype - odd sizes - 20 rounds", "[cluster]") {
  every_dtype_every_size(3, 2);
}

TEST_CASE("2 workers x 2 servers: 64 MiB fp32 for 20 rounds (5 under sanitizers) - averaged",
          "[cluster][large]") {
  // Default (auto) partitions: 16 per server, 32 of 2 MiB (BytePS's 4096000 bytes made 17).
  cluster c(test::base_config(2, 2));
  c.run_workers([](comm_t& comm, int rank) {
    const std::size_t n = (64u << 20) / sizeof(float);
    std::vector<float> v(n);
    const int rounds = test::rounds(20, 5);
    for (int round = 0; round < rounds; ++round) {
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1024 + 2 * rank + round);
      comm.push_pull("big", std::span(v), {.average = true}).wait();
      // (a + (a + 2)) / 2 = a + 1, exact in fp32 for these magnitudes.
      for (std::size_t i = 0; i < n; ++i)
        BPS_EXPECT(v[i] == static_cast<float>(i % 1024 + 1 + round), "element {} is {}", i, v[i]);
    }
    const auto s = comm.stats();
    BPS_EXPECT(s.operations > 0 && s.stages[stage::pull].partitions == 32 * s.operations,
               "{} partitions in {} operations", s.stages[stage::pull].partitions, s.operations);
    BPS_EXPECT(s.bytes_per_server.size() == 2 &&
                   s.bytes_per_server[0] == std::uint64_t{32 << 20} * rounds &&
                   s.bytes_per_server[1] == s.bytes_per_server[0],
               "bytes per server {}", fmt::join(s.bytes_per_server, ", "));
  });
}

TEST_CASE("3 workers x 2 servers: 64 MiB + 3 int8 elements - wrapping sums", "[cluster][large]") {
  cluster c(test::base_config(3, 2));
  c.run_workers([](comm_t& comm, int rank) {
    const std::size_t n = (64u << 20) + 3;
    std::vector<std::int8_t> v(n);
    for (int round = 0; round < test::rounds(3, 2); ++round) {
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int8_t>(i * 31 + rank * 100 + round);
      comm.push_pull("bytes", std::span(v)).wait();
      for (std::size_t i = 0; i < n; ++i) {
        unsigned expect = 0;
        for (unsigned w = 0; w < 3; ++w) expect += static_cast<std::uint8_t>(i * 31 + w * 100 + round);
        BPS_EXPECT(static_cast<std::uint8_t>(v[i]) == static_cast<std::uint8_t>(expect),
                   "element {}", i);
      }
    }
  });
}

TEST_CASE("broadcast copies the root's data to every worker - and barrier", "[cluster]") {
  cluster c(test::base_config(3, 2));
  c.run_workers([](comm_t& comm, int rank) {
    std::vector<double> v(5000, rank + 0.25);
    comm.broadcast("params", std::span(v), 1).wait();
    for (double x : v) BPS_EXPECT(x == 1.25, "got {}", x);
    std::vector<float> z(9, rank == 0 ? -0.0f : 5.0f);  // -0.0 survives the sum bit for bit
    comm.broadcast("negative zero", std::span(z), 0).wait();
    for (float x : z) BPS_EXPECT(std::signbit(x) && x == 0.0f, "got {}", x);
    std::vector<float16> h(33, to_float16(static_cast<float>(rank) - 7.5f));
    comm.broadcast("half", std::span(h), 2).wait();
    for (auto x : h) BPS_EXPECT(to_float(x) == -5.5f, "got {}", to_float(x));
    comm.barrier();
    comm.barrier();
    BPS_EXPECT(comm.size() == 3, "size {}", comm.size());
    BPS_EXPECT(comm.local_size() == 1, "local_size {}", comm.local_size());
  });
}

TEST_CASE("workers may declare tensors in different orders - and empty tensors complete", "[cluster]") {
  cluster c(test::base_config(2, 3));
  c.run_workers([](comm_t& comm, int rank) {
    std::vector<std::vector<int>> t(10, std::vector<int>(300));
    std::vector<handle> hs(10);
    for (int k = 0; k < 10; ++k) {
      int j = rank == 0 ? k : 9 - k;  // opposite first-use order on the two workers
      std::fill(t[j].begin(), t[j].end(), j + rank);
      hs[j] = comm.push_pull(fmt::format("t{}", j), std::span(t[j]), {.priority = j});
    }
    for (int j = 0; j < 10; ++j) {
      hs[j].wait();
      for (int x : t[j]) BPS_EXPECT(x == 2 * j + 1, "t{} holds {}", j, x);
    }
    std::vector<float> none;
    auto h = comm.push_pull("empty", std::span(none));
    BPS_EXPECT(h.ready(), "{}", "an empty push_pull is done at once");
    h.wait();
  });
}
