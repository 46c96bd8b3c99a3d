#pragma once
// An in-process cluster of any transport and local policy, for tests that are parametrised over
// them (test_matrix.cpp) or need servers on another transport than tcp (test_ipc.cpp).
#include <byteps/bodies.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace bps::test {

/// A scheduler on `SchedulerNet`, `base.num_servers` servers on `Server<ServerNet>`, and on
/// machine m `local_sizes[m]` worker threads, each with its own `Comm` running `body`. Rethrows
/// the first exception any node threw. For clusters whose workers and servers use any
/// transport; the scheduler needs another than tcp only where tcp cannot reach the others (the
/// emulated RDMA fabric). `alongside`, when given, runs on a thread of its own while the job
/// runs, with the workers' config (the scheduler's port set): a test that attacks the job's
/// listeners meanwhile (tests/tls). `options`, when given, makes the transport options of every
/// server and worker from its config (a test that counts what its transports did). The servers
/// run `Handler` (the default one, or `server::async_sum` for an async job).
template <class ServerNet, class Comm, class SchedulerNet = transport::tcp,
          class Handler = server::decoding<server::sync_sum>>
void run_cluster(Config base, std::vector<int> local_sizes, const std::function<void(Comm&)>& body,
                 const std::function<void(const Config&)>& alongside = {},
                 const std::function<typename ServerNet::options(const Config&)>& options = {}) {
  Config s = base;
  s.node_role = role::scheduler;
  SchedulerNode<SchedulerNet> scheduler(s);
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
  if (alongside) threads.emplace_back([&] { guard([&] { alongside(base); }); });
  for (int i = 0; i < base.num_servers; ++i)
    threads.emplace_back([&] {
      guard([&] {
        Config c = base;
        c.node_role = role::server;
        auto server = options ? std::make_unique<Server<ServerNet, Handler>>(c, options(c))
                              : std::make_unique<Server<ServerNet, Handler>>(c);
        server->run();
      });
    });
  for (std::size_t m = 0; m < local_sizes.size(); ++m)
    for (int l = 0; l < local_sizes[m]; ++l)
      threads.emplace_back([&, m, l] {
        guard([&] {
          Config c = base;
          c.node_role = role::worker;
          c.worker_id = static_cast<int>(m);
          c.local_rank = l;
          c.local_size = local_sizes[m];
          std::unique_ptr<Comm> comm;
          if constexpr (std::is_constructible_v<Comm, const Config&, typename ServerNet::options>) {
            if (options) comm = std::make_unique<Comm>(c, options(c));
          }
          if (!comm) comm = std::make_unique<Comm>(c);
          body(*comm);
        });
      });
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace bps::test
