// A first cluster over RDMA on the emulation: scheduler, servers and workers all on
// basic_rdma<emulated_verbs> (ranks as threads; the emulated network is in-process, the fabric
// every node gets without options). Exact sums of every dtype at odd sizes, 2 workers x 2
// servers, and a 16 MiB fp32 tensor. The whole matrix (BPS_EVERY_SETUP) is not run over RDMA yet.
#include <byteps/byteps.hpp>

#include <catch2/catch.hpp>

#include "../cluster/exact_rounds.hpp"
#include "rdma_pair.hpp"

using namespace bps;

namespace {

using comm_t = Communicator<test::emu_rdma, local::none, partition::by_bytes, schedule::priority>;

Config cluster_config(int workers, int servers) {
  Config c;
  c.num_workers = workers;
  c.num_servers = servers;
  c.scheduler_host = "127.0.0.1";
  c.log = log_level::warning;
  c.connect_timeout = std::chrono::seconds(10);
  c.rendezvous_timeout = std::chrono::seconds(20);
  c.op_timeout = std::chrono::seconds(60);
  c.server_engine_threads = 2;
  c.partition_bytes = 8192;
  return c;
}

// Every node on the same transport, the scheduler too; rethrows the first failure.
void run_rdma_cluster(Config base, const std::function<void(comm_t&)>& body) {
  Config s = base;
  s.node_role = role::scheduler;
  SchedulerNode<test::emu_rdma> scheduler(s);
  base.scheduler_port = scheduler.port();
  std::mutex mu;
  std::exception_ptr failure;
  auto guard = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (...) {
      std::lock_guard lock(mu);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back([&] { guard([&] { scheduler.run(); }); });
  for (int i = 0; i < base.num_servers; ++i)
    threads.emplace_back([&] {
      guard([&] {
        Config c = base;
        c.node_role = role::server;
        Server<test::emu_rdma> server(c);
        server.run();
      });
    });
  for (int w = 0; w < base.num_workers; ++w)
    threads.emplace_back([&, w] {
      guard([&] {
        Config c = base;
        c.node_role = role::worker;
        c.worker_id = w;
        comm_t comm(c);
        body(comm);
      });
    });
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

TEST_CASE("rdma cluster: 2 workers x 2 servers, every dtype at odd sizes, exact sums", "[rdma][cluster]") {
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
        throw std::runtime_error(fmt::format("rank {} big[{}] = {}, expected {}", comm.rank(), i, v[i], expect));
    }
  });
  CHECK(test::emu::fabric::shared_default()->violations().empty());
}
