// A job whose workers and servers all run on one host and move payloads through shared memory
// (transport::ipc): the scheduler says so in its welcome (`welcome::in_shared_memory`), and every
// worker's `partition::by_bytes` then spreads no tensor in partitions under 1 MiB. Over plain TCP
// on the same host the split is the one between hosts. An in-process cluster is one host (every
// node on 127.0.0.1).
#include "cluster.hpp"
#include "counted_ipc.hpp"
#include "run_cluster.hpp"
#include "values.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

using namespace bps;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr int rounds = 3;

// Exact sums of a 1 MiB and a 16 MiB tensor, `rounds` times; then this worker's partition
// records must be `parts_of_1mib` for the small one plus the 16 MiB one's split between hosts
// (16 of 1 MiB, which shared memory keeps), and what it pushed to each server must match.
template <class Comm>
void check_split(Comm& comm, const partition::by_bytes& elsewhere, std::uint64_t parts_of_1mib) {
  const int rank = comm.rank();
  for (int r = 0; r < rounds; ++r)
    for (std::size_t bytes : {MiB, 16 * MiB}) {
      const std::size_t n = bytes / sizeof(float);
      auto b = test::fill(dtype::float32, n, rank, r);
      comm.push_pull(fmt::format("split.{}", bytes), b.data(), n, dtype::float32).wait();
      const auto wrong = test::first_wrong(dtype::float32, b, n, comm.size(), r);
      BPS_EXPECT(wrong == n, "rank {} round {} {} bytes: element {} is not the sum", rank, r,
                 bytes, wrong);
    }
  const std::uint64_t large_parts = elsewhere.split(16 * MiB, 4).size();
  const auto st = comm.stats();
  BPS_EXPECT(st.partition_records == rounds * (parts_of_1mib + large_parts),
             "rank {}: {} partition records, {} expected ({} for 1 MiB)", rank,
             st.partition_records, rounds * (parts_of_1mib + large_parts), parts_of_1mib);
  // The 16 MiB tensor's partitions go to the two servers in turn; a 1 MiB tensor in one
  // partition adds to one server only, in 8 to both alike.
  BPS_EXPECT(st.bytes_per_server.size() == 2, "rank {}: {} servers' byte counts", rank,
             st.bytes_per_server.size());
  const auto low = std::min(st.bytes_per_server[0], st.bytes_per_server[1]);
  const auto high = std::max(st.bytes_per_server[0], st.bytes_per_server[1]);
  const std::uint64_t apart = parts_of_1mib == 1 ? rounds * MiB : 0;
  BPS_EXPECT(high - low == apart, "rank {}: {} and {} bytes pushed to the servers", rank,
             st.bytes_per_server[0], st.bytes_per_server[1]);
}

}  // namespace

TEST_CASE("one host through shared memory: a 1 MiB tensor goes whole to one server, 16 MiB "
          "as between hosts - exact sums",
          "[cluster][partition][ipc]") {
  auto cfg = test::base_config(2, 2);  // automatic partitions
  cfg.fusion_bytes = 0;
  const partition::by_bytes elsewhere(cfg);
  REQUIRE(elsewhere.split(MiB, 4).size() == 8);  // between hosts: 8 of 128 KiB
  REQUIRE(elsewhere.split(16 * MiB, 4).size() == 16);
  using ipc_comm = Communicator<test::ipc_tcp, local::none, partition::by_bytes, schedule::priority>;
  test::run_cluster<test::ipc_tcp, ipc_comm>(
      cfg, {1, 1}, [&](ipc_comm& comm) { check_split(comm, elsewhere, 1); });
}

TEST_CASE("one host over plain tcp: a 1 MiB tensor is spread as between hosts - exact sums",
          "[cluster][partition]") {
  auto cfg = test::base_config(2, 2);
  cfg.fusion_bytes = 0;
  const partition::by_bytes elsewhere(cfg);
  test::run_cluster<transport::tcp, test::comm_t>(
      cfg, {1, 1}, [&](test::comm_t& comm) { check_split(comm, elsewhere, 8); });
}

TEST_CASE("one host, BYTEPS_ENABLE_IPC=0: a 1 MiB tensor is spread as between hosts",
          "[cluster][partition][ipc]") {
  auto cfg = test::base_config(2, 2);
  cfg.fusion_bytes = 0;
  cfg.enable_ipc = false;
  const partition::by_bytes elsewhere(cfg);
  using ipc_comm = Communicator<test::ipc_tcp, local::none, partition::by_bytes, schedule::priority>;
  test::run_cluster<test::ipc_tcp, ipc_comm>(
      cfg, {1, 1}, [&](ipc_comm& comm) { check_split(comm, elsewhere, 8); });
}
