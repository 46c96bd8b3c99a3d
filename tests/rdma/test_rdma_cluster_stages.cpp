// The cluster suite over RDMA on the emulation, continued: the local stage (local::host, worker
// processes of one machine meeting in shared memory before the RDMA push) and server failover
// (a server crashed mid-run, a standby takes its rank over RDMA, every sum stays exact).
#include <byteps/bodies.hpp>
#include <catch2/catch.hpp>

#include "../cluster/exact_rounds.hpp"
#include "../cluster/failover_cluster.hpp"
#include "../cluster/run_cluster.hpp"
#include "rdma_pair.hpp"

using namespace bps;
using namespace std::chrono_literals;

TEST_CASE("rdma cluster: local::host on machines of 2 and 1 local ranks, every dtype, exact sums",
          "[rdma][cluster][local]") {
  using host_comm =
      Communicator<test::emu_rdma, local::host, partition::by_bytes, schedule::priority>;
  const std::vector<int> local_sizes = GENERATE(std::vector<int>{2, 1}, std::vector<int>{2, 2});
  const int processes = local_sizes[0] + local_sizes[1];
  CAPTURE(processes);
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 8192;
  cfg.op_timeout = 60s;
  const std::size_t sizes[] = {1, 2, 3, 1023, 4097, 20011};
  std::atomic<int> ranks_checked{0};
  test::run_cluster<test::emu_rdma, host_comm, test::emu_rdma>(
      cfg, local_sizes, [&](host_comm& comm) {
        BPS_EXPECT(comm.size() == processes, "size {}", comm.size());
        for (int round = 0; round < 3; ++round)
          test::exact_round_every_dtype(comm, sizes, round, processes, "rdma local::host: ");
        ++ranks_checked;
      });
  CHECK(ranks_checked == processes);
  CHECK(test::shared_fabric_violations().empty());
}

TEST_CASE("rdma cluster: a server killed mid-run is replaced by a standby, every sum exact",
          "[rdma][cluster][failover]") {
  const int workers = GENERATE(2, 3);
  CAPTURE(workers);
  auto cfg = test::base_config(workers, 2);
  cfg.partition_bytes = 4096;
  cfg.failover_timeout = 10s;
  cfg.heartbeat_interval = 100ms;
  cfg.heartbeat_timeout = 2000ms;
  constexpr int rounds = 24, kill_at = 8;
  constexpr std::size_t count = 5000;  // 5 partitions of fp32, on both servers
  test::failover_cluster<test::emu_rdma> c(cfg, 1);
  using comm_type = test::failover_cluster<test::emu_rdma>::comm_type;
  std::atomic<int> rounds_checked{0};
  c.run_workers([&](comm_type& comm, int rank) {
    for (int r = 0; r < rounds; ++r) {
      auto a = test::fill(dtype::float32, count, rank, r);
      auto b = test::fill(dtype::int64, 700, rank, r);
      std::vector<handle> handles;
      test::issue_then_wait_all(handles, [&] {
        handles.push_back(comm.push_pull("fo.a", a.data(), count, dtype::float32));
        handles.push_back(comm.push_pull("fo.b", b.data(), 700, dtype::int64));
        if (rank == 0 && r == kill_at) c.kill_server(1);  // with this round's pushes in flight
      });
      BPS_EXPECT(test::first_wrong(dtype::float32, a, count, workers, r) == count,
                 "worker {} round {}: fo.a is not the exact sum", rank, r);
      BPS_EXPECT(test::first_wrong(dtype::int64, b, 700, workers, r) == 700,
                 "worker {} round {}: fo.b is not the exact sum", rank, r);
      ++rounds_checked;
    }
  });
  CHECK(c.replacements() == 1);
  CHECK(rounds_checked == workers * rounds);
  CHECK(test::shared_fabric_violations().empty());
}
