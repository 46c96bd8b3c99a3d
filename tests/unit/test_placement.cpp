// Which server owns each partition: equal shares by default, and in mixed mode the BytePS
// OSDI'20 split between colocated and CPU-only servers.
#include <byteps/partition/by_bytes.hpp>
#include <byteps/partition/placement.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

bps::Config mixed_config(int machines, int cpu_servers, bool mixed = true) {
  bps::Config c;
  c.num_workers = machines;
  c.num_servers = machines + cpu_servers;
  c.mixed_mode = mixed;
  c.partition_bytes = 1 << 20;
  return c;
}

// Bytes per server for a model of many tensors of varied sizes, cut as the workers cut them.
std::vector<double> bytes_per_server(const bps::Config& c) {
  const bps::partition::by_bytes cut(c);
  const bps::server_placement where(c);
  std::vector<double> bytes(static_cast<std::size_t>(c.num_servers), 0.0);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::size_t> size(1, 8 << 20);
  for (int t = 0; t < 3000; ++t) {
    const auto key = bps::tensor_key("layer" + std::to_string(t) + ".weight");
    const auto parts = cut.split(size(rng) * 4, 4);
    for (std::uint32_t p = 0; p < parts.size(); ++p) {
      const int s = where.server_for(key, p);
      REQUIRE(s >= 0);
      REQUIRE(s < c.num_servers);
      bytes[static_cast<std::size_t>(s)] += static_cast<double>(parts[p].bytes);
    }
  }
  return bytes;
}

}  // namespace

TEST_CASE("mixed mode fraction is the OSDI'20 formula", "[policies][placement]") {
  CHECK(bps::server_placement::mixed_cpu_fraction(2, 1) == Approx(2.0 * 1 * 1 / (2 * 3 - 2)));
  CHECK(bps::server_placement::mixed_cpu_fraction(4, 2) == Approx(2.0 * 2 * 3 / (4 * 6 - 4)));
  CHECK(bps::server_placement::mixed_cpu_fraction(1, 3) == 0.0);  // one machine: nothing to gain
  // k = n: every byte that a colocated server would add to a worker's NIC is gone at k -> inf
  CHECK(bps::server_placement::mixed_cpu_fraction(8, 8) == Approx(2.0 * 8 * 7 / (8 * 16 - 16)));
}

TEST_CASE("mixed mode sends the formula's share of the bytes to the CPU servers",
          "[policies][placement]") {
  for (auto [n, k] : {std::pair{2, 1}, {2, 2}, {4, 1}, {4, 2}, {4, 4}, {8, 3}}) {
    CAPTURE(n, k);
    const auto bytes = bytes_per_server(mixed_config(n, k));
    double cpu = 0, total = 0;
    for (int s = 0; s < n + k; ++s) {
      total += bytes[static_cast<std::size_t>(s)];
      if (s >= n) cpu += bytes[static_cast<std::size_t>(s)];
    }
    const double expect = bps::server_placement::mixed_cpu_fraction(n, k);
    CHECK(cpu / total == Approx(expect).margin(0.01));
    // Within each class the servers share evenly.
    for (int s = 0; s < n + k; ++s) {
      const double share = s < n ? (1 - expect) / n : expect / k;
      CHECK(bytes[static_cast<std::size_t>(s)] / total == Approx(share).margin(0.01));
    }
  }
}

TEST_CASE("without mixed mode every server gets an equal share", "[policies][placement]") {
  const auto c = mixed_config(4, 2, false);
  const auto bytes = bytes_per_server(c);
  double total = 0;
  for (double b : bytes) total += b;
  for (double b : bytes) CHECK(b / total == Approx(1.0 / 6).margin(0.01));
  // ... and it is exactly server_for
  const bps::server_placement where(c);
  for (std::uint64_t key : {0ull, 12345ull, ~0ull})
    for (std::uint32_t p = 0; p < 20; ++p)
      CHECK(where.server_for(key, p) == bps::server_for(key, p, 6, c.key_hash));
}

TEST_CASE("mixed mode with no CPU server is refused, naming the variables",
          "[policies][placement]") {
  auto c = mixed_config(3, 0);
  CHECK_THROWS_WITH(bps::server_placement(c),
                    Catch::Contains("BYTEPS_ENABLE_MIXED_MODE") &&
                        Catch::Contains("DMLC_NUM_SERVER=3") &&
                        Catch::Contains("DMLC_NUM_WORKER=3"));
}
