#pragma once
/// @file
/// `bps::server::node<Transport, Handler>`: the summation server behind `bps::Server`
/// (server/server.hpp), as `worker::node` is the worker behind `bps::Communicator`.
///
/// The server keeps the links (`session.hpp`), the tensor names (`names.hpp`), the engine
/// threads (`engine.hpp`), who waits for which round (`waiting.hpp`), the timeline, stall reports,
/// the periodic throughput line (`stats.hpp`) and failures. What a push means is the handler's
/// (`handler.hpp`): the default, `server::decoding<server::sync_sum>`, decodes compressed pushes
/// (`decoding.hpp`) and sums one round from every worker, then answers them all (`sync_sum.hpp`).
/// Each key belongs to one engine thread
/// (`BYTEPS_SERVER_ENGINE_THREAD`), which has a handler of its own, so no lock guards the sums.
/// What the server does with a push, from the thread it is summed on to the handler's outcome
/// carried out, is in server/impl/node_push.hpp, included at the end of this file. On a
/// transport that registers memory (RDMA), each worker link's pushes of a partition land in one
/// buffer that stays from round to round (`landing.hpp`), so later rounds skip the grant. On
/// `transport::ipc`, a colocated worker's pushes are summed straight out of its shared-memory
/// ring (`in_place_receiver::takes_in_place`), with no copy into a buffer of the server's.
///
/// Failover (`Config::failover_timeout` > 0): a standby server (`Config::server_standby`) waits
/// in its constructor until the scheduler gives it a dead server's rank, or the job ends (then
/// `run()` returns at once). A replacement starts empty; how its keys catch up is the handler's
/// (sync_sum.hpp).
///
/// @par Thread Safety
/// Construct and `run()` on one thread. The server runs its own I/O and engine threads.

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/compress/registry.hpp"
#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/detail/periodic.hpp"
#include "byteps/detail/timer_thread.hpp"
#include "byteps/detail/tracer.hpp"
#include "byteps/rendezvous/client.hpp"
#include "byteps/rendezvous/gate.hpp"
#include "byteps/server/decoding.hpp"
#include "byteps/server/engine.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/landing.hpp"
#include "byteps/server/names.hpp"
#include "byteps/server/registered_pool.hpp"
#include "byteps/server/shared_pool.hpp"
#include "byteps/server/round_trace.hpp"
#include "byteps/server/session.hpp"
#include "byteps/server/stats.hpp"
#include "byteps/server/sync_sum.hpp"
#include "byteps/server/waiting.hpp"
#include "byteps/server/worker_places.hpp"
#include "byteps/transport/standard.hpp"
#include "byteps/transport/transport.hpp"

namespace bps {

namespace testing {
struct server_access;  // the tests' way into a server; not defined by the library
}  // namespace testing

namespace server {

template <class T, class H>
class node {
  static_assert(Transport<T> && ServerHandler<H>,
                "server::node<T, H>: T must model bps::Transport, H bps::ServerHandler");

 public:
  using link_ptr = std::shared_ptr<typename T::link>;
  using handler_type = H;

  /// Connects to the scheduler, listens for workers, and joins the cluster (blocks until every
  /// node joined, at most `Config::rendezvous_timeout`; a standby blocks until it replaces a
  /// dead server or the job ends). The transport is built with `transport_options`, or without
  /// them with `T::options::from(cfg)` (the environment's).
  ///
  /// `compressors` makes the compressors of the tensors that workers declare with one the
  /// servers decode (the built-ins by default; add a prototype's own with `registry::add`).
  node(const Config& cfg, const typename T::options& transport_options,
       compress::registry compressors)
      : cfg_(checked(cfg)),
        compressors_(std::move(compressors)),
        transport_(cfg, transport_options),
        control_(transport_, cfg),
        log_(cfg.log, "server"),
        gate_(cfg, log_),
        trace_(cfg, role::server) {
    try {
      start();
    } catch (...) {
      shutdown();  // the I/O threads must not call into a half-built server
      throw;
    }
  }
  node(const node&) = delete;
  node& operator=(const node&) = delete;
  ~node() { shutdown(); }

  /// This server's rank; -1 for a standby that was never needed.
  int rank() const noexcept { return rank_.load(std::memory_order_acquire); }
  std::uint16_t port() const noexcept { return port_; }

  /// Serves until the scheduler ends the job. Throws `communicator_error` when the cluster
  /// fails (a node died, the scheduler vanished).
  void run() {
    if (released_) {
      log_.info("the job ended while this standby server waited; exiting");
      finishing_ = true;
      shutdown();
      return;
    }
    try {
      control_.wait_for_shutdown();
    } catch (const communicator_error&) {
      // fail() logged why and told every worker, behind what their links still carry (an
      // answer half written to a worker slow to read): closing now would lose that word, and
      // the worker would blame this server. A live worker hangs up once it has read it.
      places_.wait_until_empty(std::chrono::steady_clock::now() + cfg_.heartbeat_interval);
      shutdown();
      throw;
    }
    log_.info("job finished; exiting");
    finishing_ = true;
    shutdown();
    for (auto& e : engines_) e->tables.remove_journals();  // their threads have stopped
  }

 private:
  // The failover tests crash a server in process through this accessor, defined in tests/ only
  // (tests/cluster/server_access.hpp), so no test-only member is part of the public API.
  friend struct testing::server_access;

  using session = server::session<node>;
  friend session;
  using session_ptr = std::shared_ptr<session>;

  // Before anything connects: a handler that cannot serve this job says so now. Elastic
  // training sums whole pushes: a piece of a round that starts over would already be in a
  // worker's buffer, where its own contribution must stay for the re-push.
  static Config checked(const Config& cfg) {
    if constexpr (server::checks_config<H>) H::check_config(cfg);
    Config served = cfg;
    if (cfg.elastic()) {
      if constexpr (!server::restarts_rounds<H>)
        throw usage_error(
            "elastic training (BYTEPS_MIN_NUM_WORKER or BYTEPS_MAX_NUM_WORKER set), but this "
            "server's handler cannot start a round over without a removed worker (it has no "
            "restart_rounds, server/handler.hpp): run Server<T> (server::sync_sum)");
      served.server_chunk_bytes = 0;
    }
    return served;
  }

  void start() {
    cfg_.validate();
    if (cfg_.failover() && !cfg_.table_journal_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(cfg_.table_journal_dir, ec);
      if (ec)
        throw usage_error(fmt::format("BYTEPS_TABLE_JOURNAL_DIR='{}' cannot be made: {}",
                                      cfg_.table_journal_dir, ec.message()));
    }
    names_.set_limits(cfg_.max_name_bytes, cfg_.max_tensors);
    server::register_pool(*pool_, transport_, log_);  // RDMA: pushes land in registered buffers
    server::share_pool(*pool_, transport_, log_);  // ipc: colocated workers read sums in place
    engines_.reserve(static_cast<std::size_t>(cfg_.server_engine_threads));
    for (int i = 0; i < cfg_.server_engine_threads; ++i)
      engines_.push_back(std::make_unique<engine>(cfg_, *pool_));
    // After the engines: fail() runs on the control link's thread and walks them, and taking
    // the failure's lock here orders their creation before it (ThreadSanitizer saw it racing).
    control_.on_failure([this](const std::string& why) { fail(why); });
    if (cfg_.elastic()) {
      start_members();
      control_.on_notice(wire::msg::membership,
                         [this](const rendezvous::frame& f) { on_membership(f); });
    }
    const std::string host = cfg_.listen_host(control_.local_host());
    // Every link is challenged at once; its first frame must be a peer_hello proving the token.
    port_ = transport_.listen(host, cfg_.server_port, [this](link_ptr l) {
      gate_.admit_and_challenge(
          l, [&](auto ticket) { return std::make_shared<session>(this, l, ticket); });
    });
    auto hello = rendezvous::hello::from(cfg_, role::server);
    hello.host = host;
    hello.port = port_;
    if constexpr (transport::SharesMemory<T>) hello.shares_memory = transport_.shares_memory();
    std::optional<rendezvous::welcome> welcome;
    if (hello.standby) {
      log_.info("standby on {}:{}: waiting to replace a server that dies", host, port_);
      welcome = control_.stand_by(hello);
      if (!welcome) {
        released_ = true;
        return;
      }
    } else {
      welcome = control_.join(hello);
    }
    worker_processes_.store(welcome->global_size, std::memory_order_release);
    // Elastic training: answers say how many processes they sum from the first round on. A
    // replacement server may have heard of a membership change already (the scheduler sends
    // it right after the welcome): on each engine, whichever comes first is kept.
    if (cfg_.elastic())
      for (auto& e : engines_)
        e->post([ep = e.get(), n = static_cast<std::uint32_t>(welcome->global_size)] {
          if (ep->contributors == 0) ep->contributors = n;
        });
    job_id_.store(welcome->job_id, std::memory_order_release);
    rank_.store(welcome->rank, std::memory_order_release);  // engine threads read it (tables)
    log_.rename(fmt::format("server {}", welcome->rank));
    gate_.rename(log_.who());
    trace_.name_node(welcome->rank, log_.who(), welcome->rank);
    log_.info("serving on {}:{} with {} engine threads for {} workers", host, port_,
              cfg_.server_engine_threads, cfg_.num_workers);
    const auto period = std::min(cfg_.stall_warning, std::chrono::milliseconds(10000));
    stall_check_.start(period, [this] {
      for (auto& e : engines_)
        e->post([this, ep = e.get()] { ep->report_stalls(cfg_, names_, log_); });
    });
    if (cfg_.server_log_interval.count() > 0 && log_.enabled(log_level::info)) {
      stats_.restart_clock();  // the first interval starts now; pushes may have come already
      stats_log_.start(cfg_.server_log_interval, [this] { report_throughput(false); });
    }
  }

  using engine = server::engine<H, session>;

  using waiting_room = typename server::waiting_rooms<session>::room;

  /// Pushes up to this size are handled on the I/O thread that read them: a hop to an engine
  /// thread costs more than the sum. Larger ones go to the engine, so I/O goes on meanwhile.
  static constexpr std::size_t inline_sum_bytes = 64 * 1024;

  // What a session asks of its server (session.hpp).
  const Config& config() const noexcept { return cfg_; }
  rendezvous::hello_gate& gate() noexcept { return gate_; }

  server::worker_places<session>& places() noexcept { return places_; }
  detail::buffer_pool::buffer receive_buffer(std::size_t bytes) { return pool_->take(bytes); }
  void recycle(detail::buffer_pool::buffer b) { pool_->give_back(std::move(b)); }
  std::int64_t now_ns() const { return trace_.now(); }
  bool streams(std::size_t bytes) const {
    return server::streams_pushes<H> && server::streamed_size(cfg_, bytes);
  }
  // Pushes land in per-link landing buffers that stay (server/landing.hpp): on a transport that
  // registers memory, with a handler that reads pushes in place. TCP and ipc keep one pool
  // buffer per push (the first of a round becomes its sum without a copy).
  static constexpr bool lands = requires { requires T::registers_memory; } &&
                                server::reads_in_place<H>;
  static constexpr bool lands_pushes() noexcept { return lands; }
  // Pushes in a colocated worker's ipc ring are read where they lie, by a handler that reads in
  // place (its keys then hold every push as a landed one: sync_sum sums them in rank order into
  // its own buffers). Every push comes to the handler that way, ring or not, so that a key never
  // mixes the two ways (sync_sum cannot).
  static constexpr bool in_place = !lands && requires { requires T::hands_in_place; } &&
                                   server::reads_in_place<H>;
  bool takes_in_place() const noexcept {
    if constexpr (in_place)
      return transport_.shortcut_enabled();
    else
      return false;
  }
  std::shared_ptr<detail::buffer_pool::buffer> landing_buffer(std::size_t bytes) {
    bool first_miss = false;
    if (!landing_budget_->take(bytes, first_miss)) {
      if (first_miss)
        log_.warn("landing buffers hold BYTEPS_SERVER_LANDING_BYTES={} bytes: pushes of further "
                  "partitions land in buffers taken per push and ask for their place every round",
                  landing_budget_->limit());
      return nullptr;
    }
    return {new detail::buffer_pool::buffer(pool_->take(bytes)),
            [pool = pool_, budget = landing_budget_](detail::buffer_pool::buffer* b) {
              budget->give(b->size);
              pool->give_back(std::move(*b));
              delete b;
            }};
  }
  std::shared_ptr<detail::buffer_pool::buffer> shared_receive_buffer(std::size_t bytes) {
    return {new detail::buffer_pool::buffer(pool_->take(bytes)),
            [pool = pool_](detail::buffer_pool::buffer* b) {
              pool->give_back(std::move(*b));
              delete b;
            }};
  }

  engine& engine_for(const key_id& k) {
    return *engines_[partition_key(k.key, k.part) % engines_.size()];
  }

  std::string dead_reason() {
    std::lock_guard lock(mu_);
    return dead_;
  }

  void declare(session& s, std::uint64_t key, std::span<const std::byte> payload) {
    server::take_declare(names_, s, key, payload, compressors_, log_);
  }

  // Every push and, with failover, sum_offer, however its bytes came (server::arriving_push):
  // a frame's only call, whole and small (`inline_sum_bytes`), is handled on the I/O thread
  // that read it; anything else on its key's engine thread, which sees a frame's calls in order.
  void post_push(session_ptr s, const wire::header& h, server::arriving_push in,
                 server::receive_times received);

  // An embedding table's request (server/tables.hpp), on its key's engine thread: every request
  // of a table goes there, so a link's requests are handled in the order they came.
  void post_rows(session_ptr s, const wire::header& h, detail::buffer_pool::buffer payload);

  // Holding e.mu, on the engine thread: the table request's outcome, carried out as a push's.
  void on_rows(engine& e, const session_ptr& s, const wire::header& h,
               std::span<const std::byte> payload);

  // What gathers the answers of a push summed while its worker's push_batch is handled
  // (server/batch_split.hpp); null for answers that go alone.
  using answer_batches = server::answer_batches<session>;

  // Holding e.mu (engine thread, or the I/O thread for small pushes). A push or, with
  // failover, a sum_offer: the handler decides, the server carries it out.
  void on_push(engine& e, const session_ptr& s, const wire::header& h, server::push_bytes push,
               server::receive_times received, answer_batches* batch = nullptr);

  // Sends the handler's answer about `h`'s partition to each of `to`, or adds it to `batch`.
  void answer(const wire::header& h, const server::reply& a, std::span<const session_ptr> to,
              answer_batches* batch = nullptr);

  // The periodic INFO line (BYTEPS_SERVER_LOG_INTERVAL_MS), and a last one at shutdown for the
  // rest of the last interval. An idle interval with nobody behind says nothing.
  void report_throughput(bool last) {
    server::report_throughput(engines_, cfg_.worker_slots(), stats_, log_, last);
  }

  // A worker's link closed without a bye: the job failed. One that closed in the middle of a
  // frame may be a worker that fell because another node did, its last word (the bye that
  // names that node: worker/server_links.hpp, say_failed) lost behind the push it was writing.
  // The scheduler loses that worker too and reports the node that failed first (the worker's
  // bye to it says which); its word comes within moments and fails this server
  // (control_.on_failure). So this server's own word goes to the waiting workers only if no
  // report came within a heartbeat interval. A close between frames (a link this server
  // dropped, a worker that vanished) fails at once, as before.
  //
  // Elastic training: the scheduler decides. It removes the worker's machine (a `membership`
  // notice) or fails the job; this server fails on its own only if the machine is still a
  // member a heartbeat timeout later (its link to a live worker broke, which the scheduler
  // cannot see).
  void worker_lost(session& s, const std::string& reason, bool mid_frame) {
    if (finishing_) return;
    auto why = fmt::format("{} disconnected ({})", s.describe(), reason);
    if (cfg_.elastic()) return fail_unless_removed(s.worker, std::move(why));
    if (!mid_frame) return fail(why);
    lost_worker_.post_at(detail::timer_thread::clock::now() + cfg_.heartbeat_interval,
                         [this, why = std::move(why)](bool cancelled) {
                           if (!cancelled) fail(why);
                         });
  }

  // Elastic training (server/impl/node_elastic.hpp). The scheduler's I/O thread: the worker
  // machines from now on; each engine restarts its rounds in flight without the removed one.
  void on_membership(const rendezvous::frame& f);
  // Before any worker connects: the machines the job forms with are its members; machines up
  // to BYTEPS_MAX_NUM_WORKER become members when they join.
  void start_members();
  // Holding e.mu, on the engine thread: `members` take part from now on.
  void restart_rounds(engine& e, const std::vector<bool>& members, std::uint32_t processes);
  // Fails the job with `why` unless the scheduler removes `machine` within a heartbeat timeout.
  void fail_unless_removed(int machine, std::string why);
  bool is_member(int machine);

  // A worker's bye carried the failure it leaves after (it lost a server, its trainer threw):
  // the job failed for that reason, which the other workers hear from here at once, naming
  // the node that failed first rather than the worker that fell after it.
  // Elastic training: a worker of a machine the scheduler removed fails for that reason (its
  // notice may come after the worker's bye): as for a lost worker, the job fails only if its
  // machine is still a member a heartbeat timeout later.
  void worker_failed(session& s, const std::string& why) {
    if (finishing_) return;
    auto what = fmt::format("{} left after a failure: {}", s.describe(), why);
    if (cfg_.elastic()) return fail_unless_removed(s.worker, std::move(what));
    fail(what);
  }

  // Any thread. The cluster is broken: answer every waiting worker with the reason, now and for
  // every later push (on_push), so that no worker waits for a sum that cannot come. Every worker
  // connected hears it too, the idle ones included, before this server exits: otherwise an idle
  // worker learns only that its link to this server closed, which names this server instead of
  // the node that failed.
  void fail(const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (!dead_.empty() || finishing_) return;
      dead_ = why;
    }
    log_.error("{}", why);
    for (auto& e : engines_) {
      e->post([ep = e.get(), why] {
        ep->waiting.for_each_waiting([&](const key_id& id, waiting_room& r) {
          wire::header h;
          h.key = id.key;
          h.part = id.part;
          h.round = r.round;
          for (auto& w : r.workers) w->send_error(h, why, wire::flag_fatal);
          r.workers.clear();
        });
      });
    }
    for (auto& w : places_.holders()) w->send_error(wire::header{}, why, wire::flag_fatal);
  }

  void shutdown() {
    if (stopped_.exchange(true)) return;
    // A failure the heartbeats find (the scheduler fell silent) runs fail() on their thread,
    // which walks the engines: it must end before a constructor that threw frees them.
    control_.stop_heartbeats();
    lost_worker_.stop();  // a pending report of a lost worker is dropped: the server is done
    gate_.stop();
    stall_check_.stop();
    stats_log_.stop();
    for (auto& e : engines_) e->thread.stop();  // finish queued sums and replies first
    transport_.stop();
    if (cfg_.server_log_interval.count() > 0 && rank() >= 0) report_throughput(true);
    trace_.write(control_.clock_offset(), log_);
  }

  Config cfg_;
  compress::registry compressors_;  // makes each declared key's server compressor
  T transport_;                     // first: the links below need its I/O context
  rendezvous::client<T> control_;
  logger log_;
  rendezvous::hello_gate gate_;  // links that have not said peer_hello yet
  detail::tracer trace_;         // the timeline: null when BYTEPS_TRACE_ON=0
  // Shared with the streamed pushes' buffers, which a link may still hold after the server.
  std::shared_ptr<detail::buffer_pool> pool_ = std::make_shared<detail::buffer_pool>();
  // Shared with the landing buffers, which may go back after the server (as pool_).
  std::shared_ptr<server::landing_budget> landing_budget_ =
      std::make_shared<server::landing_budget>(cfg_.server_landing_bytes);
  server::tensor_names names_;
  server::throughput stats_;
  server::worker_places<session> places_;  // one link per worker process
  std::mutex mu_;                          // guards dead_, epoch_, members_
  std::string dead_;
  std::uint64_t epoch_ = 0;    // elastic: the newest membership epoch, its restarts queued
  std::vector<bool> members_;  // elastic: by machine (empty: every machine, without elastic)
  std::atomic<bool> finishing_{false};
  std::atomic<bool> stopped_{false};
  bool released_ = false;  // a standby the job never needed
  std::vector<std::unique_ptr<engine>> engines_;
  std::uint16_t port_ = 0;
  std::atomic<int> rank_{-1};
  std::atomic<int> worker_processes_{1};  // the welcome's global size: a table round's pushes
  std::atomic<std::uint64_t> job_id_{0};  // the welcome's: names the tables' journals
  detail::timer_thread lost_worker_;     // worker_lost's own word, if the scheduler's is late
  detail::periodic_thread stall_check_;  // last three: stop first
  detail::periodic_thread stats_log_;
};

}  // namespace server

}  // namespace bps

#include "byteps/server/impl/node_elastic.hpp"
#include "byteps/server/impl/node_push.hpp"
