#pragma once
// An in-process cluster for failover tests: as cluster.hpp, over transport `Tr` with servers of
// handler `H` (the default one unless given), with standby
// servers and a way to crash a server (server_access::crash: every connection drops with no
// bye, as when its process is killed). With a fault plan, every node is given it in its
// transport options; with a `first_server_plan`, the first server started is given that one
// instead (to make one server misbehave: its failure is then expected). A transport that is not
// faulty ignores the plans.
#include "faulty_cluster.hpp"
#include "server_access.hpp"


namespace bps::test {

template <class Tr, class H = typename Server<Tr>::handler_type>
class failover_cluster {
 public:
  using comm_type = Communicator<Tr, local::none, partition::by_bytes, schedule::priority>;
  using server_type = Server<Tr, H>;

  /// `standby_setup`, if given, changes a standby's configuration (the rest get `base`'s).
  failover_cluster(Config base, int standbys,
                   std::shared_ptr<transport::fault_plan> plan = nullptr,
                   std::shared_ptr<transport::fault_plan> first_server_plan = nullptr,
                   std::function<void(Config&)> standby_setup = {})
      : base_(std::move(base)),
        plan_(plan ? std::move(plan) : std::make_shared<transport::fault_plan>()),
        first_server_plan_(std::move(first_server_plan)),
        standby_setup_(std::move(standby_setup)) {
    Config s = base_;
    s.node_role = role::scheduler;
    scheduler_ = std::make_unique<SchedulerNode<Tr>>(s, transport_options<Tr>(s, plan_));
    base_.scheduler_port = scheduler_->port();
    threads_.emplace_back([this] { guard(scheduler_error_, [&] { scheduler_->run(); }); });
    for (int i = 0; i < base_.num_servers; ++i) start_server(false, i == 0 ? first_server_plan_ : nullptr);
    for (int i = 0; i < standbys; ++i) start_server(true, nullptr);
  }
  failover_cluster(const failover_cluster&) = delete;
  failover_cluster& operator=(const failover_cluster&) = delete;
  ~failover_cluster() { join(); }

  transport::fault_plan& plan() { return *plan_; }

  /// Crashes the server that holds rank `rank` now (waits up to 10 s for it to exist).
  void kill_server(int rank) {
    for (int i = 0; i < 1000; ++i) {
      {
        std::lock_guard lock(mu_);
        if (auto it = live_.find(rank); it != live_.end()) {
          *it->second.killed = true;  // its run() throws, as expected
          testing::server_access::crash(*it->second.server);
          live_.erase(it);
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error(fmt::format("server {} never came up", rank));
  }

  /// Starts a server with BYTEPS_SERVER_ID=`rank`, as an operator restarts a dead one.
  void restart_server(int rank) {
    std::lock_guard lock(mu_);
    threads_.emplace_back([this, rank] { server_thread(false, rank, nullptr); });
  }

  /// How many standby or restarted servers took a rank so far.
  int replacements() const {
    std::lock_guard lock(mu_);
    return replacements_;
  }

  Config worker_config(int id) const {
    Config c = base_;
    c.node_role = role::worker;
    c.worker_id = id;
    return c;
  }

  /// Runs `body` on every worker, then waits for every node. Rethrows a worker's exception
  /// first, then (if `strict`) the scheduler's or a server's that was not killed.
  void run_workers(const std::function<void(comm_type&, int)>& body, bool strict = true) {
    std::vector<std::thread> workers;
    std::latch joined(base_.num_workers);
    for (int i = 0; i < base_.num_workers; ++i) {
      workers.emplace_back([this, &body, &joined, i] {
        guard(worker_error_, [&] {
          const Config c = worker_config(i);
          auto comm = make_with_the_others(
              joined, [&] { return std::make_unique<comm_type>(c, transport_options<Tr>(c, plan_)); });
          body(*comm, comm->rank());
        });
      });
    }
    for (auto& w : workers) w.join();
    join();
    if (worker_error_) std::rethrow_exception(worker_error_);
    if (strict && scheduler_error_) std::rethrow_exception(scheduler_error_);
    if (strict && server_error_) std::rethrow_exception(server_error_);
  }

  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  std::exception_ptr scheduler_error() const { return scheduler_error_; }

  /// Lets a test thread record a failure like the cluster's own threads do.
  void guard_worker(const std::function<void()>& f) { guard(worker_error_, f); }
  std::exception_ptr worker_error() const { return worker_error_; }

  /// Elastic training: whether the server that holds rank `rank` now applied membership epoch
  /// `epoch` on every engine within `timeout` (server_access::applied_membership).
  bool applied_membership(int rank, std::uint64_t epoch, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      server_type* s = nullptr;
      {
        std::lock_guard lock(mu_);
        if (auto it = live_.find(rank); it != live_.end()) s = it->second.server;
      }
      if (s != nullptr) return testing::server_access::applied_membership(*s, epoch, timeout);
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  void start_server(bool standby, std::shared_ptr<transport::fault_plan> own_plan) {
    threads_.emplace_back([this, standby, own_plan] { server_thread(standby, -1, own_plan); });
  }

  void server_thread(bool standby, int id, std::shared_ptr<transport::fault_plan> own_plan) {
    {
      Config c = base_;
      c.node_role = role::server;
      c.server_standby = standby;
      c.server_id = id;
      if (standby && standby_setup_) standby_setup_(c);
      std::unique_ptr<server_type> server;
      bool killed = own_plan != nullptr;  // a server made to misbehave may fail
      guard(server_error_, [&] {
        server = std::make_unique<server_type>(
            c, transport_options<Tr>(c, own_plan ? own_plan : plan_));
      });
      if (!server) return;
      {
        std::lock_guard lock(mu_);
        if (server->rank() >= 0) live_.insert_or_assign(server->rank(), live{server.get(), &killed});
        if ((standby || id >= 0) && server->rank() >= 0) ++replacements_;
      }
      try {
        server->run();
      } catch (...) {
        std::lock_guard lock(mu_);
        if (!killed && !server_error_) server_error_ = std::current_exception();
      }
      std::lock_guard lock(mu_);
      for (auto it = live_.begin(); it != live_.end(); ++it)
        if (it->second.server == server.get()) {
          live_.erase(it);
          break;
        }
    }
  }

  void guard(std::exception_ptr& slot, const std::function<void()>& f) {
    try {
      f();
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!slot) slot = std::current_exception();
    }
  }

  watchdog watchdog_{std::chrono::seconds(90)};  // first: watches the whole life of the cluster
  Config base_;
  std::shared_ptr<transport::fault_plan> plan_;
  std::shared_ptr<transport::fault_plan> first_server_plan_;
  std::function<void(Config&)> standby_setup_;
  std::unique_ptr<SchedulerNode<Tr>> scheduler_;
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  struct live {
    server_type* server;
    bool* killed;  // the server thread's own flag, guarded by mu_
  };
  std::map<int, live> live_;  // rank -> the server that holds it now
  int replacements_ = 0;
  std::exception_ptr worker_error_;
  std::exception_ptr scheduler_error_;
  std::exception_ptr server_error_;
};

}  // namespace bps::test
