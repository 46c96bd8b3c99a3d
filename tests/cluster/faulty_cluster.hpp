#pragma once
// An in-process cluster over transport::faulty<tcp>: as cluster.hpp, but every node (scheduler,
// servers, workers) is given the test's plan in its transport options, so the plan's rules see
// the frames of every node. A watchdog turns a hang into a failed test with a message.
#include "cluster.hpp"

#include <byteps/transport/faulty/faulty.hpp>

#include "faulty_instances.hpp"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>

namespace bps::test {

using faulty_tcp = transport::faulty<transport::tcp>;
using faulty_comm_t =
    Communicator<faulty_tcp, local::none, partition::by_bytes, schedule::priority>;
static_assert(bps::Transport<faulty_tcp>);

/// Transport options for a node of a test cluster over `Tr`: the environment's (`cfg`), plus
/// `plan` where `Tr` is a faulty transport (a plain one has no plan to take).
template <class Tr>
typename Tr::options transport_options(const Config& cfg,
                                       std::shared_ptr<transport::fault_plan> plan) {
  auto opts = Tr::options::from(cfg);
  if constexpr (requires { opts.plan = plan; }) opts.plan = std::move(plan);
  return opts;
}

/// Ends the process with a message when a test runs longer than `limit` (a hang must never
/// stall the suite until CTest's timeout, and must say which test it was).
class watchdog {
 public:
  explicit watchdog(std::chrono::seconds limit)
      : thread_([this, limit] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, limit, [&] { return done_; })) {
            std::fprintf(stderr, "watchdog: the test did not finish within %lld s: a hang\n",
                         static_cast<long long>(limit.count()));
            std::fflush(stderr);
            std::abort();
          }
        }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last
};

/// Servers run request handler `Handler`.
// The library's own default handler, whatever it is, so these clusters run what byteps-server
// runs (a copy of the default here went stale once).
template <ServerHandler Handler = typename Server<transport::tcp>::handler_type>
class basic_faulty_cluster {
 public:
  basic_faulty_cluster(Config base, std::shared_ptr<transport::fault_plan> plan)
      : base_(std::move(base)), plan_(std::move(plan)) {
    Config s = base_;
    s.node_role = role::scheduler;
    scheduler_ = std::make_unique<SchedulerNode<faulty_tcp>>(
        s, transport_options<faulty_tcp>(s, plan_));
    base_.scheduler_port = scheduler_->port();
    threads_.emplace_back([this] { guard(node_error_, [&] { scheduler_->run(); }); });
    for (int i = 0; i < base_.num_servers; ++i) {
      threads_.emplace_back([this] {
        guard(node_error_, [&] {
          Config c = base_;
          c.node_role = role::server;
          Server<faulty_tcp, Handler> server(c, transport_options<faulty_tcp>(c, plan_));
          server.run();
        });
      });
    }
  }
  basic_faulty_cluster(const basic_faulty_cluster&) = delete;
  basic_faulty_cluster& operator=(const basic_faulty_cluster&) = delete;
  ~basic_faulty_cluster() { join(); }

  transport::fault_plan& plan() { return *plan_; }

  Config worker_config(int id = -1) const {
    Config c = base_;
    c.node_role = role::worker;
    c.worker_id = id;
    return c;
  }

  /// A worker's communicator that uses the plan (for a test thread of its own).
  std::unique_ptr<faulty_comm_t> make_worker(int id = -1) {
    const Config c = worker_config(id);
    return std::make_unique<faulty_comm_t>(c, transport_options<faulty_tcp>(c, plan_));
  }

  /// Runs `body` on every worker, then waits for the scheduler and servers to finish.
  /// Rethrows a worker's exception first; a scheduler's or server's only if `strict`.
  void run_workers(const std::function<void(faulty_comm_t&, int)>& body, bool strict = true) {
    std::vector<std::thread> workers;
    std::latch joined(base_.num_workers);
    for (int i = 0; i < base_.num_workers; ++i) {
      workers.emplace_back([this, &body, &joined, i] {
        guard(worker_error_, [&] {
          auto comm = make_with_the_others(joined, [&] { return make_worker(i); });
          body(*comm, comm->rank());
        });
      });
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

 private:
  void guard(std::exception_ptr& slot, const std::function<void()>& f) {
    try {
      f();
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!slot) slot = std::current_exception();
    }
  }

  watchdog watchdog_{std::chrono::seconds(60)};  // first: watches the whole life of the cluster
  Config base_;
  std::shared_ptr<transport::fault_plan> plan_;
  std::unique_ptr<SchedulerNode<faulty_tcp>> scheduler_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::exception_ptr worker_error_;
  std::exception_ptr node_error_;
};

using faulty_cluster = basic_faulty_cluster<>;

}  // namespace bps::test
