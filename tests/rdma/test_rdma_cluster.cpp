// A first cluster over RDMA on the emulation: scheduler, servers and workers all on
// basic_rdma<emulated_verbs> (ranks as threads; the emulated network is in-process, the fabric
// every node gets without options). Exact sums of every dtype at odd sizes, 2 workers x 2
// servers, and a 16 MiB fp32 tensor. The whole matrix (BPS_EVERY_SETUP) is not run over RDMA yet.
#include <byteps/byteps.hpp>
#include <catch2/catch.hpp>

#include "../cluster/cluster.hpp"
#include "../cluster/exact_rounds.hpp"
#include "../cluster/run_cluster.hpp"
#include "rdma_pair.hpp"

using namespace bps;

namespace {

using comm_t = Communicator<test::emu_rdma, local::none, partition::by_bytes, schedule::priority>;

Config cluster_config(int workers, int servers) {
  Config c = test::base_config(workers, servers);
  c.op_timeout = std::chrono::seconds(60);
  c.partition_bytes = 8192;
  return c;
}

// Every node on the emulated fabric, the scheduler too; one worker per machine.
void run_rdma_cluster(Config base, const std::function<void(comm_t&)>& body) {
  const std::vector<int> one_worker_each(static_cast<std::size_t>(base.num_workers), 1);
  test::run_cluster<test::emu_rdma, comm_t, test::emu_rdma>(base, one_worker_each, body);
}

}  // namespace

TEST_CASE("rdma cluster: 2 workers x 2 servers, every dtype at odd sizes, exact sums",
          "[rdma][cluster]") {
  const std::size_t sizes[] = {1, 3, 1023, 4097, 20011};
  run_rdma_cluster(cluster_config(2, 2), [&](comm_t& comm) {
    for (int round = 0; round < 3; ++round)
      test::exact_round_every_dtype(comm, sizes, round, 2, "rdma 2x2: ");
  });
  CHECK(test::emu::fabric::shared_default()->violations().empty());
}

TEST_CASE("rdma cluster: 2 workers x 2 servers, 16 MiB fp32, exact sums", "[rdma][cluster]") {
  constexpr std::size_t n = 4u << 20;  // 16 MiB of fp32
  auto cfg = cluster_config(2, 2);
  cfg.partition_bytes = 1u << 20;
  run_rdma_cluster(cfg, [&](comm_t& comm) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(comm.rank() + (i % 1024));
    comm.push_pull("big", std::span(v)).wait();
    for (std::size_t i = 0; i < n; ++i) {
      const float expect = static_cast<float>(1 + 2 * (i % 1024));
      if (v[i] != expect)
        throw std::runtime_error(
            fmt::format("rank {} big[{}] = {}, expected {}", comm.rank(), i, v[i], expect));
    }
  });
  CHECK(test::emu::fabric::shared_default()->violations().empty());
}
