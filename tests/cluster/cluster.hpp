#pragma once
// An in-process cluster for tests: the scheduler, the servers and the workers each run on their
// own thread with their own Config, over loopback with an ephemeral scheduler port.
#include <byteps/bodies.hpp>
#include <byteps/compress/registry.hpp>

#include <exception>
#include <stdexcept>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// Catch2's assertions are not thread-safe: code on worker threads checks with this, which throws;
// run_workers() rethrows on the test's thread, where Catch reports it.
#define BPS_EXPECT(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw std::runtime_error(fmt::format("{}:{}: expected {}: {}", __FILE__, __LINE__, #cond, \
                                           fmt::format(__VA_ARGS__)));                     \
  } while (0)

namespace bps::test {

using comm_t = Communicator<transport::tcp, local::none, partition::by_bytes, schedule::priority>;
using host_comm_t =
    Communicator<transport::tcp, local::host, partition::by_bytes, schedule::priority>;

/// Builds a worker's communicator with `make`, then waits until every worker has built its own
/// or failed to. A body that cuts a link or kills a node then cannot reach a worker still
/// joining, which would fail in its constructor instead of in the call the test watches.
template <class Make>
auto make_with_the_others(std::latch& joined, Make&& make) {
  try {
    auto comm = make();
    joined.arrive_and_wait();
    return comm;
  } catch (...) {
    joined.count_down();
    throw;
  }
}

/// The message of the `E` that `f` throws, or "(no exception)".
template <class E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

inline Config base_config(int workers, int servers) {
  Config c;
  c.num_workers = workers;
  c.num_servers = servers;
  c.scheduler_host = "127.0.0.1";
  c.log = log_level::warning;
  c.connect_timeout = std::chrono::seconds(10);
  c.rendezvous_timeout = std::chrono::seconds(20);
  c.op_timeout = std::chrono::seconds(30);
  c.server_engine_threads = 2;
  return c;
}

/// `base_config` with the timeline on, recording steps [start, end) into `dir`.
inline Config traced_config(int workers, int servers, const std::string& dir, int start, int end) {
  Config c = base_config(workers, servers);
  c.trace_on = true;
  c.trace_start_step = start;
  c.trace_end_step = end;
  c.trace_dir = dir;
  return c;
}

/// Runs `worker(comm, rank)` on `workers` threads against `servers` servers, each with request
/// handler `Handler`. Rethrows the first exception any node threw.
// The library's own default handler, whatever it is, so these clusters run what byteps-server
// runs (a copy of the default here went stale once).
template <ServerHandler Handler = typename Server<transport::tcp>::handler_type>
class basic_cluster {
 public:
  using server_type = Server<transport::tcp, Handler>;

  /// `on_server`, when given, runs on each server's thread once it joined, before it serves
  /// (a test that captures a server's log sets its sink there).
  /// `compressors`: what the servers make declared compressors with (the built-ins by default).
  explicit basic_cluster(Config base, std::function<void(server_type&)> on_server = {},
                         compress::registry compressors = {})
      : base_(std::move(base)),
        on_server_(std::move(on_server)),
        compressors_(std::move(compressors)) {
    Config s = base_;
    s.node_role = role::scheduler;
    scheduler_ = std::make_unique<SchedulerNode<transport::tcp>>(s);
    base_.scheduler_port = scheduler_->port();
    threads_.emplace_back([this] { guard(node_error_, [&] { scheduler_->run(); }); });
    for (int i = 0; i < base_.num_servers; ++i) {
      threads_.emplace_back([this] {
        guard(node_error_, [&] {
          Config c = base_;
          c.node_role = role::server;
          server_type server(c, transport::tcp::options::from(c), compressors_);
          if (on_server_) on_server_(server);
          {
            std::lock_guard lock(mu_);
            server_ports_[server.rank()] = server.port();
          }
          server.run();
        });
      });
    }
  }

  std::uint16_t scheduler_port() const { return base_.scheduler_port; }

  /// The port of server `rank`, once it joined (waits up to 10 s).
  std::uint16_t server_port(int rank) {
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard lock(mu_);
        if (auto it = server_ports_.find(rank); it != server_ports_.end()) return it->second;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("server did not start");
  }

  Config worker_config(int id = -1) const {
    Config c = base_;
    c.node_role = role::worker;
    c.worker_id = id;
    return c;
  }

  /// Runs `body` on every worker, then waits for the scheduler and servers to finish.
  /// Rethrows a worker's exception first; a scheduler's or server's only if `strict`.
  void run_workers(const std::function<void(comm_t&, int)>& body, bool strict = true) {
    std::vector<std::thread> workers;
    std::latch joined(base_.num_workers);
    for (int i = 0; i < base_.num_workers; ++i) {
      workers.emplace_back([this, &body, &joined, i] {
        guard(worker_error_, [&] {
          auto comm = make_with_the_others(
              joined, [&] { return std::make_unique<comm_t>(worker_config(i)); });
          body(*comm, comm->rank());
        });
      });
    }
    for (auto& w : workers) w.join();
    join();
    if (worker_error_) std::rethrow_exception(worker_error_);
    if (strict && node_error_) std::rethrow_exception(node_error_);
  }

  /// Runs `body` on every local rank of every machine: machine m has `local_sizes[m]` local
  /// ranks, each a thread with its own communicator of type `Comm`, made by `make` from the
  /// rank's Config when given (a faulty transport's plan goes in its options), else from the
  /// Config alone.
  template <class Comm>
  void run_local(const std::vector<int>& local_sizes, const std::function<void(Comm&)>& body,
                 bool strict = true,
                 const std::function<std::unique_ptr<Comm>(const Config&)>& make = {}) {
    std::vector<std::thread> workers;
    for (std::size_t m = 0; m < local_sizes.size(); ++m) {
      for (int l = 0; l < local_sizes[m]; ++l) {
        workers.emplace_back([this, &body, &make, &local_sizes, m, l] {
          guard(worker_error_, [&] {
            Config c = worker_config(static_cast<int>(m));
            c.local_rank = l;
            c.local_size = local_sizes[m];
            auto comm = make ? make(c) : std::make_unique<Comm>(c);
            body(*comm);
          });
        });
      }
    }
    for (auto& w : workers) w.join();
    join();
    if (worker_error_) std::rethrow_exception(worker_error_);
    if (strict && node_error_) std::rethrow_exception(node_error_);
  }

  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  std::exception_ptr node_error() const { return node_error_; }

  ~basic_cluster() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  /// Lets a test thread record a failure like the cluster's own threads do.
  void guard_worker(const std::function<void()>& f) { guard(worker_error_, f); }

 private:
  void guard(std::exception_ptr& slot, const std::function<void()>& f) {
    try {
      f();
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!slot) slot = std::current_exception();
    }
  }

  Config base_;
  std::function<void(server_type&)> on_server_;
  compress::registry compressors_;
  std::unique_ptr<SchedulerNode<transport::tcp>> scheduler_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::map<int, std::uint16_t> server_ports_;
  std::exception_ptr worker_error_;
  std::exception_ptr node_error_;
};

using cluster = basic_cluster<>;

}  // namespace bps::test
