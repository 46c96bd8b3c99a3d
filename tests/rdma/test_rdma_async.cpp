// Asynchronous training over RDMA: async_sum reads each landed push during `handle` (adds it to
// the parameters, or drops it while the key waits for rank 0's seed), so a worker's landing
// buffer is free again before its answer, and every push after a partition's first goes direct.
// With integer dtypes the final parameters are the initial ones plus every delta, exactly
// (tests/cluster/async_exact.hpp, as over TCP).
#include <byteps/bodies.hpp>
#include <catch2/catch.hpp>

#include "../cluster/async_exact.hpp"
#include "../cluster/cluster.hpp"
#include "../cluster/run_cluster.hpp"
#include "rdma_pair.hpp"

using namespace bps;
using namespace bps::test;

TEST_CASE("rdma async: landed pushes, every delta applied exactly once, pushes direct after the first",
          "[rdma][cluster][async][push_places]") {
  using rdma_comm_t = Communicator<emu_rdma, local::none, partition::by_bytes, schedule::priority>;
  constexpr int workers = 2;
  Config cfg = base_config(workers, 2);
  cfg.enable_async = true;
  cfg.partition_bytes = 4096;  // "big": 4 partitions of 4096 bytes (announced) and 3616 (a SEND)
  auto worker_tally = std::make_shared<transport::rdma_msg::tally>();
  auto server_tally = std::make_shared<transport::rdma_msg::tally>();
  run_cluster<emu_rdma, rdma_comm_t, emu_rdma, server::async_sum>(
      cfg, std::vector<int>(workers, 1),
      [&](rdma_comm_t& comm) { exact_worker(comm, comm.rank(), workers); },
      {},
      [&](const Config& c) {
        auto o = emu_rdma::options::from(c);
        o.tally = c.node_role == role::server ? server_tally : worker_tally;
        return o;
      });
  const auto wc = worker_tally->snapshot();
  const auto sc = server_tally->snapshot();
  // Each worker push_pulls "big" async_rounds + 2 times (the seed, the deltas, the final read).
  constexpr std::uint64_t large = workers * 4;  // large pushes per push_pull of "big", all workers
  CHECK(wc.announced == large);
  CHECK(wc.cached == large * (async_rounds + 1));
  CHECK(sc.advertised == large);
  CHECK(sc.granted_in_place == large);
  CHECK(sc.moved == 0);
  CHECK(emu::fabric::shared_default()->violations().empty());
}
