#pragma once
/// @file
/// `bps::rendezvous::scheduler<Transport>`: the scheduler role (DMLC_ROLE=scheduler), behind
/// `bps::SchedulerNode` (rendezvous/scheduler_node.hpp). It waits for every
/// server and worker to say hello (in any order), refuses a node whose settings differ, assigns
/// ranks, hands everyone the server table, runs worker barriers, and tells the servers to exit
/// once every worker said bye. When a node dies after the cluster formed, it tells everyone
/// else which node died, so nobody waits forever.
///
/// With failover on (`Config::failover_timeout` > 0) a server lost after the cluster formed is
/// not the end: its rank goes to a standby server (BYTEPS_SERVER_STANDBY=1, which joins at any
/// time and waits) or to a server restarted with BYTEPS_SERVER_ID of that rank, whichever is
/// there first; the replacement gets a `welcome` with that rank and every worker a
/// `server_replaced` naming the rank and the new address. When none comes within the timeout
/// the job fails as without failover, naming the lost server (see docs/reliability.md).
///
/// With elastic training (`Config::elastic()`) a worker machine lost after the cluster formed,
/// or one that says bye mid-job, is removed instead: the scheduler bumps the membership epoch
/// and tells every server and remaining worker which machines go on (`membership`); barriers
/// count the members only. Fewer than BYTEPS_MIN_NUM_WORKER left fails the job naming why. A
/// worker that says hello to a running elastic job joins it at a step boundary all members
/// agree on, with the job's state from one of them.
///
/// The frames of nodes that joined and the heartbeat monitor are in
/// rendezvous/impl/scheduler_control.hpp; joining is in rendezvous/impl/scheduler_join.hpp, failover in
/// rendezvous/impl/scheduler_failover.hpp, elastic training in
/// rendezvous/impl/scheduler_elastic.hpp and, for joins to a running job,
/// rendezvous/impl/scheduler_join_running.hpp; all are included at the end of this file.

#include <fmt/core.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/clock_sync.hpp"
#include "byteps/detail/periodic.hpp"
#include "byteps/rendezvous/gate.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/rendezvous/one_host.hpp"
#include "byteps/rendezvous/vacancies.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/codec.hpp"

namespace bps {

namespace testing {
struct scheduler_access;  // the tests' way into a scheduler; not defined by the library
}  // namespace testing

namespace rendezvous {

template <class T>
class scheduler {
  static_assert(Transport<T>, "rendezvous::scheduler<T>: T must model bps::Transport");

 public:
  using clock = std::chrono::steady_clock;
  using link_ptr = std::shared_ptr<typename T::link>;

  /// Listens on `scheduler_host:scheduler_port` (port 0: any free port; see `port()`). The
  /// transport is built with `transport_options`, or without them with `T::options::from(cfg)`
  /// (the environment's).
  scheduler(const Config& cfg, const typename T::options& transport_options)
      : cfg_(cfg),
        transport_(cfg, transport_options),
        log_(cfg.log, "scheduler"),
        gate_(cfg, log_) {
    cfg_.validate();
    mine_ = rendezvous::hello::from(cfg_, role::scheduler);
    // Every connection is challenged at once; its first frame must be a hello proving the token.
    port_ = transport_.listen(cfg_.scheduler_host, cfg_.scheduler_port, [this](link_ptr l) {
      gate_.admit_and_challenge(
          l, [&](auto ticket) { return std::make_shared<session>(this, l, ticket); });
    });
    log_.info("listening on {}:{} for {} workers and {} servers", cfg_.scheduler_host, port_,
              cfg_.num_workers, cfg_.num_servers);
    monitor_.start(cfg_.heartbeat_interval, [this] { check_heartbeats(); });
  }
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;
  ~scheduler() {
    gate_.stop();
    monitor_.stop();
    transport_.stop();
  }

  std::uint16_t port() const noexcept { return port_; }

  /// Connections refused before their hello, by reason (rendezvous/gate.hpp).
  rendezvous::gate_counts refused_connections() const { return gate_.counts(); }

  /// Runs the job's control plane; returns when every worker said bye and the servers were told
  /// to exit. Throws `communicator_error` when rendezvous times out or a node dies.
  void run() {
    std::unique_lock lock(mu_);
    const auto deadline = clock::now() + cfg_.rendezvous_timeout;
    if (!cv_.wait_until(lock, deadline, [&] { return complete_locked() || !failure_.empty(); })) {
      auto why = fmt::format(
          "rendezvous timed out after {} ms: {} of {} workers (machines with all their local "
          "ranks) and {} of {} servers joined (BYTEPS_RENDEZVOUS_TIMEOUT_MS)",
          cfg_.rendezvous_timeout.count(), machines_locked(true), cfg_.num_workers,
          count_locked(role::server), cfg_.num_servers);
      fail_locked(why);
      finish(lock);
      throw communicator_error(why);
    }
    if (!failure_.empty()) {
      auto why = failure_;
      finish(lock);
      throw communicator_error(why);
    }
    assign_and_welcome_locked();
    cv_.wait(lock, [&] { return !failure_.empty() || all_workers_left_locked(); });
    if (!failure_.empty()) {
      auto why = failure_;
      finish(lock);
      throw communicator_error(why);
    }
    log_.info("every worker left; telling {} servers to exit", cfg_.num_servers);
    shutting_down_ = true;
    for (auto& n : nodes_)
      if (n.alive && n.r == role::server) send_locked(n.link, wire::msg::shutdown, {});
    finish(lock);
  }

 private:
  friend struct testing::scheduler_access;
  struct node {
    role r = role::worker;
    int requested = -1;  // workers: the machine (DMLC_WORKER_ID); servers: BYTEPS_SERVER_ID
    int local_rank = 0;
    int local_size = 1;
    int rank = -1;
    std::string host;
    std::uint16_t port = 0;
    std::string peer;
    link_ptr link;
    clock::time_point last_heard = clock::now();
    bool left = false;  // said bye
    bool alive = true;
    bool standby = false;  // a server waiting for a dead server's rank (failover)
    bool joining = false;  // elastic: a worker waiting to join the running job
    bool shares_memory = false;  // its hello's: moves payloads through shared memory
  };

  class session final : public transport::receiver, public transport::peer_admission {
   public:
    session(scheduler* owner, link_ptr l, std::shared_ptr<rendezvous::pending_hello> t)
        : link_(std::move(l)), ticket(std::move(t)), owner_(owner) {}
    transport::receiver_capabilities capabilities() override { return {.admission = this}; }
    std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
      if (node_index < 0 && !refused && h.type != wire::msg::hello) {
        reason = fmt::format("it sent a {} frame of {} bytes before its hello",
                             wire::msg_name(h.type), h.payload_bytes);
        owner_->gate_.refused(*ticket, reason);
        return {};
      }
      // A worker's `at_boundary` may carry the job's state for a joining worker.
      const std::uint64_t limit =
          h.type == wire::msg::at_boundary && node_index >= 0 ? wire::max_state_payload : 65536;
      if (h.payload_bytes > limit) {
        reason = fmt::format("a {} frame of {} bytes (a control frame has at most {})",
                             wire::msg_name(h.type), h.payload_bytes, limit);
        return {};
      }
      scratch_.resize(h.payload_bytes);
      return scratch_;
    }
    void on_message(const wire::header& h, std::span<std::byte> payload) override {
      owner_->handle(*this, h, payload);
    }
    void on_close(const std::string& reason) override { owner_->closed(*this, reason); }
    bool peer_admitted() const override { return node_index >= 0; }
    link_ptr link_;
    std::shared_ptr<rendezvous::pending_hello> ticket;  // until its hello proved the token
    int node_index = -1;
    bool refused = false;  // told why it cannot join; closing

   private:
    scheduler* owner_;
    std::vector<std::byte> scratch_;
  };

  // The record of a node that said `h` on link `l`.
  static node node_of(const rendezvous::hello& h, const link_ptr& l) {
    node n;
    n.r = h.node_role;
    n.requested = h.requested_rank;
    n.local_rank = h.local_rank;
    n.local_size = h.local_size;
    n.host = h.host;
    n.port = h.port;
    n.peer = l->peer();
    n.link = l;
    n.shares_memory = h.shares_memory;
    return n;
  }

  // Joining (rendezvous/impl/scheduler_join.hpp).
  int count_locked(role r) const;
  int machines_locked(bool full_only) const;
  bool complete_locked() const;
  std::optional<std::string> refusal_locked(const rendezvous::hello& theirs) const;
  void hello_locked(session& s, std::span<std::byte> payload);
  void assign_and_welcome_locked();

  bool all_workers_left_locked() const {
    for (const auto& n : nodes_)
      if (n.alive && n.r == role::worker && !n.left) return false;
    // A worker that died after saying nothing is a failure, reported through failure_.

    return true;
  }
  // "worker 1 at host:port": its rank, or before ranks are given the one it asked for
  // (DMLC_WORKER_ID, BYTEPS_SERVER_ID), which becomes its rank.
  std::string describe(const node& n) const {
    const std::string local =
        n.r == role::worker && n.local_size > 1 ? fmt::format(" local rank {}", n.local_rank) : "";
    const int rank = n.rank >= 0 ? n.rank : n.requested;
    return rank >= 0 ? fmt::format("{} {}{} at {}", role_name(n.r), rank, local, n.peer)
                     : fmt::format("{}{} at {}", role_name(n.r), local, n.peer);
  }

  void send_locked(const link_ptr& l, wire::msg type, std::vector<std::byte> payload,
                   std::uint64_t round = 0, bool close_after = false) {
    auto body = std::make_shared<std::vector<std::byte>>(std::move(payload));
    wire::header h;
    h.type = type;
    h.round = round;
    ++sends_in_flight_;
    l->send(h, *body, [this, body, l, close_after] {
      if (close_after) l->close();
      std::lock_guard lock(mu_);
      if (--sends_in_flight_ == 0 && draining_) cv_.notify_all();
    });
  }
  static std::vector<std::byte> text(const std::string& s) {
    auto b = wire::as_bytes(s);
    return {b.begin(), b.end()};
  }

  // Before it joined: logged (naming the peer) and counted by the gate.
  void refuse_locked(session& s, const std::string& why) {
    gate_.refused(*s.ticket, why);
    s.refused = true;
    send_locked(s.link_, wire::msg::refuse, text(why), 0, true);
  }

  // A frame from a node that said hello (rendezvous/impl/scheduler_control.hpp).
  void handle(session& s, const wire::header& h, std::span<std::byte> payload);

  // A heartbeat with the node's clock in `round` (BYTEPS_TRACE_ON): echo it with ours in
  // `offset`, read as late as possible (rendezvous/client.hpp, detail/clock_sync.hpp).
  static void answer_clock_probe(session& s, std::uint64_t node_time) {
    wire::header r;
    r.type = wire::msg::heartbeat;
    r.round = node_time;
    r.offset = static_cast<std::uint64_t>(detail::steady_ns());
    s.link_->send(r, {}, {});
  }

  // Every barrier that each worker process still in the job entered is released.
  void release_barriers_locked() {
    for (auto it = barriers_.begin(); it != barriers_.end();) {
      if (static_cast<int>(it->second.size()) < workers_) {
        ++it;
        continue;
      }
      for (auto& w : nodes_)
        if (w.alive && w.r == role::worker && !w.joining)
          send_locked(w.link, wire::msg::barrier_release, {}, it->first);
      it = barriers_.erase(it);
    }
  }

  // Elastic training (rendezvous/impl/scheduler_elastic.hpp).
  void worker_removed_locked(node& n, const std::string& what, bool lost);
  bool machine_left_locked(int machine) const {
    for (const auto& x : nodes_)
      if (x.alive && x.r == role::worker && x.rank == machine && !x.left) return false;
    return true;
  }
  // The worker machines in the job (and `joining`, a machine joining it; -1 for none), with
  // their local sizes and process count.
  rendezvous::membership members_locked(int joining) const;
  // A worker process of a machine in the job, still there.
  bool member_locked(const node& n) const {
    return n.alive && !n.left && n.r == role::worker && !n.joining && n.rank >= 0 &&
           !removed_.contains(n.rank);
  }

  // Elastic training, joins to the running job (rendezvous/impl/scheduler_join_running.hpp).
  std::optional<std::string> join_refusal_locked(const rendezvous::hello& theirs) const;
  std::vector<int> joining_nodes_locked(int machine) const;
  // Machine `k` is in the job, or processes of it wait to join.
  bool machine_in_use_locked(int k) const;
  void join_running_locked(session& s, const rendezvous::hello& theirs);
  void next_join_locked();
  void join_frame_locked(int from, const wire::header& h, std::span<std::byte> payload);
  void advance_join_locked();
  void finish_join_locked();
  void abort_join_locked(const std::string& why);
  void removal_boundary_locked(const std::vector<int>& members, std::uint64_t boundary);
  void send_join_at_locked(const link_ptr& l, std::uint64_t boundary, std::uint32_t sender,
                           std::uint64_t epoch);
  void joiner_lost_locked(node& n, const std::string& what);

  // Failover (rendezvous/impl/scheduler_failover.hpp).
  std::optional<std::string> late_server_refusal_locked(const rendezvous::hello& theirs) const;
  void server_lost_locked(node& n, const std::string& what);
  void place_replacements_locked();
  void check_vacancies_locked(clock::time_point now);

  void closed(session& s, const std::string& reason) {
    std::lock_guard lock(mu_);
    cv_.notify_all();  // a node gone may be what run() waits for (the last worker)
    if (s.node_index < 0) {  // never said hello (or was refused): logged once, by the gate
      if (!s.refused) gate_.closed(*s.ticket, reason);
      return;
    }
    node& n = nodes_[static_cast<std::size_t>(s.node_index)];
    if (!n.alive) return;
    n.alive = false;
    if (n.left || shutting_down_) return;
    lost_locked(n, fmt::format("disconnected ({})", reason));
  }

  // A node is gone without bye (rendezvous/impl/scheduler_failover.hpp).
  void lost_locked(node& n, const std::string& what);

  // A node that joined is gone without saying bye: the job cannot go on, before or after the
  // cluster formed. Everyone still connected is told which node, so nobody waits for it.
  void node_failed_locked(node& n, const std::string& what) {
    job_failed_locked(fmt::format("{} {}{}; the job cannot continue", describe(n), what,
                                  formed_ ? "" : " while the cluster was forming"));
  }

  void job_failed_locked(const std::string& why) {
    if (!failure_.empty()) return;
    failure_ = why;
    log_.error("{}", failure_);
    fail_locked(failure_);
    cv_.notify_all();
  }

  // Monitor thread: beat to every node, and fail a node silent for longer than the timeout.
  void check_heartbeats();

  void fail_locked(const std::string& why) {
    for (auto& n : nodes_)
      if (n.alive && !n.left) send_locked(n.link, wire::msg::node_failed, text(why));
  }

  // run() waits for a change a frame or a link's close makes, each of which notifies; sends
  // completing do not (only while finish() drains them), so a change made without a frame of
  // the node's own (a removal that takes a machine's other local ranks, a joiner refused) must
  // notify itself. The monitor notifies once a heartbeat interval as well, so a change that
  // forgets costs at most that.
  // Lets queued notices leave (bounded), then closes everything.
  void finish(std::unique_lock<std::mutex>& lock) {
    draining_ = true;
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return sends_in_flight_ == 0; });
    lock.unlock();
    gate_.stop();
    monitor_.stop();
    transport_.stop();
    lock.lock();
  }

  Config cfg_;
  T transport_;  // first: links held below need its I/O context; ~scheduler stops it first
  logger log_;
  rendezvous::hello_gate gate_;  // connections that have not said hello yet
  rendezvous::hello mine_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<node> nodes_;
  std::map<std::uint64_t, std::set<int>> barriers_;  // by barrier: the nodes that entered it
  rendezvous::welcome table_;     // as sent at formation; failover updates the server table
  rendezvous::vacancies vacant_;  // failover: ranks of dead servers awaiting a replacement
  bool formed_ = false;
  bool shutting_down_ = false;
  std::string failure_;
  int sends_in_flight_ = 0;
  bool draining_ = false;  // finish() waits for sends_in_flight_ to reach 0
  int workers_ = 0;                  // worker processes, once formed (elastic: still in the job)
  std::uint64_t epoch_ = 0;          // elastic: membership changes so far
  std::set<int> removed_;            // elastic: worker machines removed from the job
  std::vector<std::byte> last_server_notice_;  // elastic: the servers' newest membership, for
                                               // a replacement server (failover)
  // Elastic: failures a worker left with, each judged at its deadline (check_heartbeats): the
  // job fails then unless the worker's machine was removed meanwhile.
  struct left_after_failure {
    clock::time_point deadline;
    int machine;
    std::string why;
  };
  std::vector<left_after_failure> failures_to_judge_;
  // Elastic: the worker joining the running job now (one at a time), and those waiting. With
  // no machine (-1) it is a removal's agreement: its boundary is only where the workers see it.
  struct running_join {
    int machine = -1;                       // the joining machine (-1: none)
    std::vector<int> nodes;                 // its processes, in nodes_, by local rank
    std::uint64_t boundary = 0;             // the agreed step boundary, once decided
    int donor = -1;                         // the member machine that sends the state
    std::map<int, std::uint64_t> reports;   // member -> step boundaries it passed
    std::set<int> waiting;                  // members waiting at the boundary
    std::map<int, std::vector<std::byte>> states;  // the job's state, by the donor's local rank
    std::uint64_t epoch = 0;                // the servers were told of it in this epoch
    std::set<int> acked;                    // servers that applied it
    std::string lost;                       // the joiner was lost after the servers were told
    clock::time_point deadline;
  };
  std::optional<running_join> join_;
  std::deque<int> joins_waiting_;  // joining machines with all their processes, first come first
  bool removals_unseen_ = false;   // a removal waits for a boundary where the workers see it
  detail::periodic_thread monitor_;  // last: stops first
  std::uint16_t port_ = 0;
};

}  // namespace rendezvous

}  // namespace bps

#include "byteps/rendezvous/impl/scheduler_control.hpp"
#include "byteps/rendezvous/impl/scheduler_elastic.hpp"
#include "byteps/rendezvous/impl/scheduler_failover.hpp"
#include "byteps/rendezvous/impl/scheduler_join.hpp"
#include "byteps/rendezvous/impl/scheduler_join_running.hpp"
