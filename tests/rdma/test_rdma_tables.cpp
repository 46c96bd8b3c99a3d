// Embedding tables over the RDMA emulation: scheduler, servers and workers on the emulated
// fabric, every pulled row exact against the reference (../cluster/tables_reference.hpp) for each
// optimizer, and the fabric reporting no broken verbs rule.
#include <byteps/bodies.hpp>
#include <catch2/catch.hpp>

#include "../cluster/cluster.hpp"
#include "../cluster/run_cluster.hpp"
#include "../cluster/tables_reference.hpp"
#include "rdma_pair.hpp"

using namespace bps;

TEST_CASE("rdma tables: sgd, adagrad and adam rows equal the reference - 2 workers x 2 servers",
          "[rdma][cluster][tables]") {
  using emu_comm = Communicator<test::emu_rdma, local::none, partition::by_bytes, schedule::priority>;
  for (const auto& entry : test::tables::optimizers) {
    const auto& recipe = entry.first;  // not a structured binding: clang 14 cannot capture one
    const auto& opt = entry.second;
    INFO(recipe);
    const auto spec = test::tables::spec_of("emb_rdma_" + opt.kind, recipe, dtype::float32);
    test::run_cluster<test::emu_rdma, emu_comm, test::emu_rdma>(
        test::base_config(2, 2), {1, 1},
        [&](emu_comm& comm) { test::tables::exact_rounds<float>(comm, spec, opt, 3); });
  }
  CHECK(test::shared_fabric_violations().empty());
}
