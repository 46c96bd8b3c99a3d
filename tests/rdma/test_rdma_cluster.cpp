// The multi-rank cluster suite over RDMA on the emulation: scheduler, servers and workers all on
// basic_rdma<emulated_verbs> (ranks as threads; every node without options gets the shared
// default fabric). Every dtype at odd sizes on 1x1, 2x2 and 3x2, answers cut through in pieces,
// averages and broadcast, and a 64 MiB tensor; each result compared with the exact sum. The
// local stage and failover over RDMA are in test_rdma_cluster_stages.cpp. Every test ends with
// the fabric reporting no broken verbs rule.
#include <byteps/bodies.hpp>
#include <catch2/catch.hpp>

#include "../cluster/cluster.hpp"
#include "../cluster/exact_rounds.hpp"
#include "../cluster/run_cluster.hpp"
#include "rdma_pair.hpp"

using namespace bps;

namespace {

using emu_comm_t = Communicator<test::emu_rdma, local::none, partition::by_bytes, schedule::priority>;

Config cluster_config(int workers, int servers, std::size_t chunk = 0) {
  Config c = test::base_config(workers, servers);
  c.op_timeout = std::chrono::seconds(60);
  c.partition_bytes = 8192;  // several partitions per tensor, on every server
  c.server_chunk_bytes = chunk;
  return c;
}

// Every node on the emulated fabric, the scheduler too; one worker per machine.
void run_rdma_cluster(Config base, const std::function<void(emu_comm_t&)>& body) {
  const std::vector<int> one_worker_each(static_cast<std::size_t>(base.num_workers), 1);
  test::run_cluster<test::emu_rdma, emu_comm_t, test::emu_rdma>(base, one_worker_each, body);
}

}  // namespace

TEST_CASE("rdma cluster: every dtype at odd sizes on 1x1, 2x2 and 3x2, exact sums",
          "[rdma][cluster]") {
  const auto shape = GENERATE(std::pair{1, 1}, std::pair{2, 2}, std::pair{3, 2});
  const int workers = shape.first, servers = shape.second;  // the lambda below captures them
  CAPTURE(workers, servers);
  const std::size_t sizes[] = {1, 3, 1023, 4097, 20011};
  std::atomic<int> ranks_checked{0};
  run_rdma_cluster(cluster_config(workers, servers), [&](emu_comm_t& comm) {
    BPS_EXPECT(comm.size() == workers, "size {}", comm.size());
    const auto context = fmt::format("rdma {}x{}: ", workers, servers);
    for (int round = 0; round < 3; ++round)
      test::exact_round_every_dtype(comm, sizes, round, workers, context);
    ++ranks_checked;
  });
  CHECK(ranks_checked == workers);  // every rank saw 3 rounds x 7 dtypes x 5 sizes exact
  CHECK(test::shared_fabric_violations().empty());
}

TEST_CASE("rdma cluster: answers cut through in 1 KiB pieces, every dtype, exact sums",
          "[rdma][cluster][cut_through]") {
  const std::size_t sizes[] = {1, 1023, 4097, 20011};
  std::atomic<int> ranks_checked{0};
  run_rdma_cluster(cluster_config(2, 2, 1024), [&](emu_comm_t& comm) {
    for (int round = 0; round < 2; ++round)
      test::exact_round_every_dtype(comm, sizes, round, 2, "rdma cut-through: ");
    ++ranks_checked;
  });
  CHECK(ranks_checked == 2);
  CHECK(test::shared_fabric_violations().empty());
}

TEST_CASE("rdma cluster: average and broadcast on 3 workers x 2 servers", "[rdma][cluster]") {
  std::atomic<int> ranks_checked{0};
  run_rdma_cluster(cluster_config(3, 2), [&](emu_comm_t& comm) {
    const int rank = comm.rank();
    // rank r pushes r + i: the mean over 3 is 1 + i, exact.
    std::vector<double> v(5000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = rank + static_cast<double>(i);
    comm.push_pull("mean", std::span(v), {.average = true}).wait();
    for (std::size_t i = 0; i < v.size(); ++i)
      BPS_EXPECT(v[i] == 1.0 + static_cast<double>(i), "rank {} mean[{}] = {}", rank, i, v[i]);
    // Broadcast from rank 2, -0.0 and NaN bits too.
    std::vector<float> b(3001, static_cast<float>(rank));
    if (rank == 2) {
      b[0] = -0.0f;
      b[1] = std::numeric_limits<float>::quiet_NaN();
    }
    comm.broadcast("from 2", std::span(b), 2).wait();
    BPS_EXPECT(std::signbit(b[0]) && b[0] == 0.0f, "rank {} b[0] = {}", rank, b[0]);
    BPS_EXPECT(std::isnan(b[1]), "rank {} b[1] = {}", rank, b[1]);
    for (std::size_t i = 2; i < b.size(); ++i)
      BPS_EXPECT(b[i] == 2.0f, "rank {} b[{}] = {}", rank, i, b[i]);
    ++ranks_checked;
  });
  CHECK(ranks_checked == 3);
  CHECK(test::shared_fabric_violations().empty());
}

TEST_CASE("rdma cluster: 2 workers x 2 servers, 64 MiB fp32 twice, exact sums", "[rdma][cluster]") {
  constexpr std::size_t n = 16u << 20;  // 64 MiB of fp32
  auto cfg = cluster_config(2, 2);
  cfg.partition_bytes = 4u << 20;  // 16 partitions of 4 MiB, 8 on each server
  std::atomic<int> ranks_checked{0};
  run_rdma_cluster(cfg, [&](emu_comm_t& comm) {
    std::vector<float> v(n);
    for (int round = 0; round < 2; ++round) {
      // rank r, round k: r + k + (i mod 1024); the sum over 2 is 1 + 2k + 2 (i mod 1024).
      for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>(comm.rank() + round + static_cast<int>(i % 1024));
      comm.push_pull("big", std::span(v)).wait();
      for (std::size_t i = 0; i < n; ++i) {
        const float expect = static_cast<float>(1 + 2 * round + 2 * static_cast<int>(i % 1024));
        if (v[i] != expect)
          throw std::runtime_error(fmt::format("rank {} round {} big[{}] = {}, expected {}",
                                               comm.rank(), round, i, v[i], expect));
      }
    }
    ++ranks_checked;
  });
  CHECK(ranks_checked == 2);
  CHECK(test::shared_fabric_violations().empty());
}
