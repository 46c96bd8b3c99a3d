#pragma once
// An in-process cluster for tests: the scheduler, the servers and the workers each run on their
// own thread with their own Config, over loopback with an ephemeral scheduler port.
#include <byteps/byteps.hpp>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bps::test {

using comm_t = Communicator<transport::tcp, local::none, partition::by_bytes, schedule::priority>;

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

/// Runs `worker(comm, rank)` on `workers` threads against `servers` servers. Rethrows the
/// first exception any node threw.
class cluster {
 public:
  explicit cluster(Config base) : base_(std::move(base)) {
    Config s = base_;
    s.node_role = role::scheduler;
    scheduler_ = std::make_unique<SchedulerNode<transport::tcp>>(s);
    base_.scheduler_port = scheduler_->port();
    threads_.emplace_back([this] { guard([&] { scheduler_->run(); }); });
    for (int i = 0; i < base_.num_servers; ++i) {
      threads_.emplace_back([this] {
        guard([&] {
          Config c = base_;
          c.node_role = role::server;
          Server<transport::tcp> server(c);
          server.run();
        });
      });
    }
  }

  Config worker_config(int id = -1) const {
    Config c = base_;
    c.node_role = role::worker;
    c.worker_id = id;
    return c;
  }

  void run_workers(const std::function<void(comm_t&, int)>& body) {
    std::vector<std::thread> workers;
    for (int i = 0; i < base_.num_workers; ++i) {
      workers.emplace_back([this, &body, i] {
        guard([&] {
          comm_t comm(worker_config(i));
          body(comm, comm.rank());
        });
      });
    }
    for (auto& w : workers) w.join();
    join();
  }

  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    if (first_error_) std::rethrow_exception(first_error_);
  }

  ~cluster() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  std::exception_ptr first_error() const { return first_error_; }

 private:
  void guard(const std::function<void()>& f) {
    try {
      f();
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!first_error_) first_error_ = std::current_exception();
    }
  }

  Config base_;
  std::unique_ptr<SchedulerNode<transport::tcp>> scheduler_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::exception_ptr first_error_;
};

}  // namespace bps::test
