#pragma once
/// @file
/// `bps::Server<Transport>`: a summation server, built from the same headers as the workers so
/// that an application can run one with its own transport (`tools/byteps_server.cpp` is the
/// shipped one, a few lines).
///
/// Each pushed partition is summed in place into that key's buffer by the engine thread that
/// owns the key (keys spread over `BYTEPS_SERVER_ENGINE_THREAD` threads, so no lock guards the
/// sums). When every worker pushed the key for the round (synchronous training), each worker is
/// sent the sum. fp16 and bf16 accumulate in fp32. The sum of round r lives in buffer r % 2: a
/// worker can only push round r+1 after it received round r, so round r+1's sum never
/// overwrites bytes still being sent for round r.
///
/// Failover (`Config::failover_timeout` > 0): a standby server (`Config::server_standby`) waits
/// in its constructor until the scheduler gives it a dead server's rank, or the job ends (then
/// `run()` returns at once). A replacement starts empty: each key adopts the round of the first
/// push or `sum_offer`, and answers a worker that re-pushes the previous round with that round's
/// sum (key_state.hpp). Sums are taken in worker-rank order so they are the same bits on every
/// server.
///
/// @par Thread Safety
/// Construct and `run()` on one thread. The server runs its own I/O and engine threads.

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/detail/periodic.hpp"
#include "byteps/detail/task_queue.hpp"
#include "byteps/detail/tracer.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/rendezvous/client.hpp"
#include "byteps/server/key_state.hpp"
#include "byteps/transport/transport.hpp"

namespace bps {

namespace testing {
struct server_access;  // the tests' way into a server; not defined by the library
}  // namespace testing

template <Transport T>
class Server {
 public:
  using link_ptr = std::shared_ptr<typename T::link>;

  /// Connects to the scheduler, listens for workers, and joins the cluster (blocks until every
  /// node joined, at most `Config::rendezvous_timeout`; a standby blocks until it replaces a
  /// dead server or the job ends). The transport is built with `transport_options`, or without
  /// them with `T::options::from(cfg)` (the environment's).
  explicit Server(const Config& cfg) : Server(cfg, T::options::from(cfg)) {}
  Server(const Config& cfg, const typename T::options& transport_options)
      : cfg_(cfg),
        transport_(cfg, transport_options),
        control_(transport_, cfg),
        log_(cfg.log, "server"),
        trace_(cfg, role::server) {
    try {
      start();
    } catch (...) {
      shutdown();  // the I/O threads must not call into a half-built server
      throw;
    }
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server() { shutdown(); }

  /// This server's rank; -1 for a standby that was never needed.
  int rank() const noexcept { return rank_; }
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
      shutdown();  // fail() already logged why
      throw;
    }
    log_.info("job finished; exiting");
    finishing_ = true;
    shutdown();
  }

 private:
  // The failover tests crash a server in process through this accessor, defined in tests/ only
  // (tests/cluster/server_access.hpp), so no test-only member is part of the public API.
  friend struct testing::server_access;

  void start() {
    cfg_.validate();
    control_.on_failure([this](const std::string& why) { fail(why); });
    const std::string host = cfg_.node_host.empty() ? control_.local_host() : cfg_.node_host;
    port_ = transport_.listen(host, cfg_.server_port, [this](link_ptr l) {
      auto s = std::make_shared<session>(this, l);
      l->start(s);
    });
    engines_.reserve(static_cast<std::size_t>(cfg_.server_engine_threads));
    for (int i = 0; i < cfg_.server_engine_threads; ++i)
      engines_.push_back(std::make_unique<engine>());
    auto hello = rendezvous::hello::from(cfg_, role::server);
    hello.host = host;
    hello.port = port_;
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
    rank_ = welcome->rank;
    log_.rename(fmt::format("server {}", rank_));
    trace_.name_node(rank_, log_.who(), rank_);
    log_.info("serving on {}:{} with {} engine threads for {} workers", host, port_,
              cfg_.server_engine_threads, cfg_.num_workers);
    const auto period = std::min(cfg_.stall_warning, std::chrono::milliseconds(10000));
    stall_check_.start(period, [this] {
      for (auto& e : engines_) e->post([this, ep = e.get()] { report_stalls(*ep); });
    });
  }

  class session;
  using key_state = server::key_state<session>;

  struct engine {
    std::mutex mu;  // guards keys: held by the engine thread per task, or by an I/O thread
    std::unordered_map<key_id, key_state, key_id_hash> keys;
    detail::task_thread thread;  // after keys: joins before they are destroyed

    /// Runs `task` on the engine thread, holding `mu`.
    template <class F>
    void post(F task) {
      thread.post([this, task = std::move(task)]() mutable {
        std::lock_guard lock(mu);
        task();
      });
    }
  };

  /// Pushes up to this size are summed on the I/O thread that read them: a hop to an engine
  /// thread costs more than the sum. Larger ones go to the engine, so I/O goes on meanwhile.
  static constexpr std::size_t inline_sum_bytes = 64 * 1024;

  class session final : public transport::receiver,
                        public std::enable_shared_from_this<session> {
   public:
    session(Server* owner, link_ptr l) : link(std::move(l)), owner_(owner) {}

    std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
      switch (h.type) {
        case wire::msg::push:
          if (worker < 0) {
            reason = "push before peer_hello";
            return {};
          }
          received_ns_ = owner_->trace_.now();
          incoming_ = owner_->pool_.take(h.payload_bytes);
          return incoming_.span();
        case wire::msg::sum_offer:
          if (!owner_->cfg_.failover()) {
            reason = "sum_offer while failover is off";
            return {};
          }
          if (worker < 0) {
            reason = "sum_offer before peer_hello";
            return {};
          }
          incoming_ = owner_->pool_.take(h.payload_bytes);
          return incoming_.span();
        case wire::msg::declare:
          if (h.payload_bytes > 4096) {
            reason = "tensor name longer than 4096 bytes";
            return {};
          }
          small_.resize(h.payload_bytes);
          return small_;
        default:
          if (h.payload_bytes != 0) reason = fmt::format("unexpected {} frame", wire::msg_name(h.type));
          return {};
      }
    }

    void on_message(const wire::header& h, std::span<std::byte> payload) override {
      switch (h.type) {
        case wire::msg::peer_hello:
          if (worker >= 0 || h.sender >= static_cast<std::uint32_t>(owner_->cfg_.num_workers))
            throw std::runtime_error(fmt::format("bad peer_hello (worker {})", h.sender));
          if (h.key != rendezvous::job_token_digest(owner_->cfg_.job_token))
            throw std::runtime_error("peer_hello without this job's BYTEPS_JOB_TOKEN");
          worker = static_cast<int>(h.sender);
          return;
        case wire::msg::declare:
          return owner_->declare(*this, h.key,
                                 std::string(reinterpret_cast<const char*>(payload.data()),
                                             payload.size()));
        case wire::msg::push:
        case wire::msg::sum_offer:
          if (h.sender != static_cast<std::uint32_t>(worker))
            throw std::runtime_error(
                fmt::format("{} with another worker's rank", wire::msg_name(h.type)));
          return owner_->post_push(this->shared_from_this(), h, std::move(incoming_),
                                   {received_ns_, owner_->trace_.now()});
        case wire::msg::bye:
          said_bye = true;
          return;
        default:
          throw std::runtime_error(fmt::format("unexpected {} frame from a worker",
                                               wire::msg_name(h.type)));
      }
    }

    void on_close(const std::string& reason) override {
      owner_->pool_.give_back(std::move(incoming_));
      // A connection that never said peer_hello is no worker (a stray client, a port scan).
      if (worker >= 0 && !said_bye) owner_->worker_lost(*this, reason);
    }

    std::string describe() const {
      return worker >= 0 ? fmt::format("worker {} at {}", worker, link->peer())
                         : fmt::format("a peer at {}", link->peer());
    }

    link_ptr link;
    int worker = -1;
    std::atomic<bool> said_bye{false};

   private:
    Server* owner_;
    detail::buffer_pool::buffer incoming_;  // I/O thread only
    std::int64_t received_ns_ = 0;          // timeline: when incoming_'s frame began
    std::vector<std::byte> small_;
  };

  engine& engine_for(const key_id& k) {
    return *engines_[partition_key(k.key, k.part) % engines_.size()];
  }

  std::string tensor_name(std::uint64_t key) {
    std::lock_guard lock(mu_);
    auto it = names_.find(key);
    return it != names_.end() ? "'" + it->second + "'" : fmt::format("key {:#x}", key);
  }

  std::string dead_reason() {
    std::lock_guard lock(mu_);
    return dead_;
  }

  void declare(session& s, std::uint64_t key, std::string name) {
    std::string clash;
    {
      std::lock_guard lock(mu_);
      auto [it, inserted] = names_.emplace(key, name);
      if (!inserted && it->second != name) clash = it->second;
    }
    if (!clash.empty()) {
      wire::header h;
      h.key = key;
      h.part = server::whole_tensor;
      reply_error(s, h,
                  fmt::format("tensor names '{}' and '{}' hash to the same key {:#x}; rename one "
                              "of them",
                              clash, name, key),
                  wire::flag_usage);
    }
  }

  /// Timeline: when a push's frame began to arrive and when it was in (0 with tracing off).
  struct receive_times {
    std::int64_t began_ns = 0, arrived_ns = 0;
  };

  void post_push(std::shared_ptr<session> s, const wire::header& h,
                 detail::buffer_pool::buffer payload, receive_times received) {
    key_id id{h.key, h.part};
    auto& e = engine_for(id);
    if (payload.size <= inline_sum_bytes) {
      {
        std::lock_guard lock(e.mu);
        on_push(e, s, h, payload, received);
      }
      pool_.give_back(std::move(payload));
      return;
    }
    e.post([this, &e, s = std::move(s), h, received,
            payload = std::make_shared<detail::buffer_pool::buffer>(std::move(payload))]() mutable {
      on_push(e, s, h, *payload, received);
      pool_.give_back(std::move(*payload));
    });
  }

  // Holding e.mu (engine thread, or the I/O thread for small pushes). A push or, with
  // failover, a sum_offer.
  void on_push(engine& e, const std::shared_ptr<session>& s, const wire::header& h,
               detail::buffer_pool::buffer& payload, receive_times received) {
    if (auto dead = dead_reason(); !dead.empty()) return reply_error(*s, h, dead, wire::flag_fatal);
    auto& k = e.keys.try_emplace(key_id{h.key, h.part}, pool_, cfg_.failover()).first->second;
    auto name = [&] { return tensor_name(h.key); };
    if (h.type == wire::msg::sum_offer) {
      bool completes = false;
      auto problem = k.offer(h, payload, s->worker, cfg_.num_workers, completes, name);
      if (!problem.empty()) return reply_error(*s, h, problem, wire::flag_usage);
      if (!completes) return;
      log_.debug("{} partition {} round {}: {} worker(s) answered with worker {}'s sum_offer",
                 name(), h.part, h.round, k.waiting.size(), s->worker);
      return finish_round(k, h);
    }
    if (cfg_.failover() && k.initialized()) {
      // A worker re-pushes the round whose sum the dead server never delivered to it.
      if (auto previous = k.previous_sum(h.round)) {
        log_.debug("{} partition {} round {}: worker {} re-pushed it; answered with the kept sum",
                   name(), h.part, h.round, s->worker);
        return answer(k, h.round, h, *previous, {s});
      }
    }
    const bool traced = trace_.on() && (h.flags & wire::flag_traced) != 0;
    const auto sum_ns = traced ? trace_.now() : 0;
    auto problem = k.accept(h, payload, s->worker, cfg_.num_workers, name);
    if (!problem.empty()) return reply_error(*s, h, problem, wire::flag_usage);
    if (traced) trace_pushed(k, h, s->worker, received, sum_ns);
    k.waiting.push_back(s);
    if (static_cast<int>(k.waiting.size()) < cfg_.num_workers) return;
    finish_round(k, h);
  }

  void finish_round(key_state& k, const wire::header& h) {
    const auto complete_ns = trace_.now();
    if (!k.round_error.empty()) {
      for (auto& w : k.waiting) reply_error(*w, h, k.round_error, wire::flag_usage);
    } else {
      answer(k, k.round, h, k.finish_round(), k.waiting);
    }
    if (trace_.on()) trace_answered(k, h, complete_ns);
    k.next_round();
  }

  // Timeline: the spans of worker `worker`'s traced push (receive, sum), and of the round's
  // answer to each traced worker (wait, answer), with the flows to and from the workers.
  void trace_pushed(key_state& k, const wire::header& h, int worker, receive_times received,
                    std::int64_t sum_ns) {
    k.trace_summed_ns.resize(static_cast<std::size_t>(cfg_.num_workers), 0);
    k.trace_summed_ns[static_cast<std::size_t>(worker)] =
        trace_.pushed(h.key, h.part, h.round, worker, h.payload_bytes, received.began_ns,
                      received.arrived_ns, sum_ns, trace_.now(), [&] { return plain_name(h.key); });
  }
  void trace_answered(const key_state& k, const wire::header& h, std::int64_t complete_ns) {
    for (const auto& w : k.waiting)
      if (static_cast<std::size_t>(w->worker) < k.trace_summed_ns.size())
        trace_.answered(h.key, h.part, k.round, w->worker,
                        k.trace_summed_ns[static_cast<std::size_t>(w->worker)], complete_ns,
                        [&] { return plain_name(h.key); });
  }
  std::string plain_name(std::uint64_t key) {
    std::lock_guard lock(mu_);
    auto it = names_.find(key);
    return it != names_.end() ? it->second : fmt::format("key {:#x}", key);
  }

  // Sends round `round`'s sum of `h`'s partition to each of `to`.
  void answer(const key_state& k, std::uint64_t round, const wire::header& h,
              std::span<const std::byte> sum, const std::vector<std::shared_ptr<session>>& to) {
    wire::header r;
    r.type = wire::msg::pull_response;
    r.key = h.key;
    r.part = h.part;
    r.round = round;
    r.dtype = static_cast<std::uint32_t>(k.type);
    r.offset = k.offset;
    r.tensor_bytes = k.tensor_bytes;
    for (auto& w : to) w->link->send(r, sum, {});
  }

  // Engine thread. Like Horovod's stall inspector: name the workers a round has waited for
  // longer than BYTEPS_STALL_WARNING_MS, once per round, so a slow job says why.
  void report_stalls(engine& e) {
    const auto now = std::chrono::steady_clock::now();
    int reported = 0, more = 0;
    for (auto& [id, k] : e.keys) {
      if (k.waiting.empty() || k.stall_reported || now - k.round_started < cfg_.stall_warning)
        continue;
      k.stall_reported = true;
      if (reported++ >= 10) {
        ++more;
        continue;
      }
      auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - k.round_started);
      log_.warn("stalled: {} partition {} round {} has waited {} s for worker(s) {} to push it "
                "({} of {} pushed)",
                tensor_name(id.key), id.part, k.round, waited.count(),
                fmt::join(k.missing(), ", "), k.waiting.size(), cfg_.num_workers);
    }
    if (more > 0) log_.warn("stalled: {} more partitions are waiting the same way", more);
  }

  void reply_error(session& s, const wire::header& about, const std::string& text,
                   std::uint32_t flags) {
    auto body = std::make_shared<std::string>(text);
    wire::header r;
    r.type = wire::msg::error;
    r.flags = flags;
    r.key = about.key;
    r.part = about.part;
    r.round = about.round;
    s.link->send(r, wire::as_bytes(*body), [body] {});
  }

  void worker_lost(session& s, const std::string& reason) {
    if (finishing_) return;
    fail(fmt::format("{} disconnected ({})", s.describe(), reason));
  }

  // Any thread. The cluster is broken: answer every waiting worker with the reason, now and for
  // every later push, so that no worker waits for a sum that cannot come.
  void fail(const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (!dead_.empty() || finishing_) return;
      dead_ = why;
    }
    log_.error("{}", why);
    for (auto& e : engines_) {
      e->post([this, ep = e.get(), why] {
        for (auto& [id, k] : ep->keys) {
          wire::header h;
          h.key = id.key;
          h.part = id.part;
          h.round = k.round;
          for (auto& w : k.waiting) reply_error(*w, h, why, wire::flag_fatal);
          k.next_round();
        }
      });
    }
  }

  void shutdown() {
    if (stopped_.exchange(true)) return;
    stall_check_.stop();
    for (auto& e : engines_) e->thread.stop();  // finish queued sums and replies first
    transport_.stop();
    trace_.write(control_.clock_offset(), log_);
  }

  Config cfg_;
  T transport_;  // first: the links below need its I/O context
  rendezvous::client<T> control_;
  logger log_;
  detail::tracer trace_;  // the timeline: null when BYTEPS_TRACE_ON=0
  detail::buffer_pool pool_;
  std::mutex mu_;
  std::unordered_map<std::uint64_t, std::string> names_;
  std::string dead_;
  std::atomic<bool> finishing_{false};
  std::atomic<bool> stopped_{false};
  bool released_ = false;  // a standby the job never needed
  std::vector<std::unique_ptr<engine>> engines_;
  std::uint16_t port_ = 0;
  int rank_ = -1;
  detail::periodic_thread stall_check_;  // last: stops first
};

}  // namespace bps
