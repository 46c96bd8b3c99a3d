#pragma once
/// @file
/// `bps::rendezvous::client`: a server's or worker's link to the scheduler: join the cluster,
/// enter barriers, say bye, and hear when the cluster dies. Every wait has a deadline.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/clock_sync.hpp"
#include "byteps/detail/periodic.hpp"
#include "byteps/rendezvous/handshake.hpp"
#include "byteps/rendezvous/inbox.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/transport/transport.hpp"

namespace bps::rendezvous {

template <Transport T>
class client {
 public:
  using clock = std::chrono::steady_clock;

  /// Connects to the scheduler and takes its challenge (at most `Config::hello_timeout`), which
  /// `join` answers with the hello. The scheduler may close a connection before its challenge
  /// (BYTEPS_MAX_PENDING_CONNECTIONS full: a flood, a port scan) or send none in time: then
  /// this node tries again on a fresh connection, pausing as `hello_backoff` says, all of it
  /// (the connecting included) within `Config::connect_timeout`.
  client(T& transport, const Config& cfg)
      : cfg_(cfg), transport_(transport), log_(cfg.log, std::string(role_name(cfg.node_role))) {
    connect_until(clock::now() + cfg.connect_timeout);
  }

  ~client() { heartbeat_.stop(); }

  std::string local_host() const { return link_->local_host(); }
  std::string scheduler() const { return link_->peer(); }
  /// This node's clock offset to the scheduler (the timeline's, detail/trace.hpp): measured at
  /// connect and with every heartbeat when BYTEPS_TRACE_ON=1; otherwise from the one probe that
  /// follows the hello (which tells that the scheduler read it).
  detail::clock_offset clock_offset() const { return inbox_->clock_offset(); }
  /// `f` learns, once, why the cluster failed: the scheduler's report of a dead node, or the
  /// loss of the scheduler itself. A failure that came after the join but before this call is
  /// told now, on this thread: a node still setting up after its welcome must not miss it.
  void on_failure(std::function<void(const std::string&)> f) {
    std::function<void(const std::string&)> told;
    std::optional<std::string> missed;
    {
      std::lock_guard lock(relay_->mu);
      relay_->failure = [f = std::move(f), peer = link_->peer()](const std::string& why) {
        f(why.starts_with("the scheduler") ? why : "lost the scheduler at " + peer + ": " + why);
      };
      told = relay_->failure;
      missed = std::exchange(relay_->unheard, std::nullopt);
    }
    if (missed) told(*missed);
  }

  /// Frames of `type` (a notice such as `server_replaced`) go to `f` on the I/O thread.
  void on_notice(wire::msg type, std::function<void(const frame&)> f) {
    notices_.emplace_back(type, f);
    inbox_->on_notice(type, std::move(f));
  }

  /// Sends `hello` and waits for the scheduler's answer until `Config::rendezvous_timeout`.
  welcome join(const hello& h) {
    auto w = join_until(h, clock::now() + cfg_.rendezvous_timeout);
    if (!w) throw communicator_error("the scheduler ended the job before this node joined");
    return *w;
  }

  /// A standby server's join: sends `hello` (with `standby` set) and waits with no deadline of
  /// its own (heartbeats still end the wait when the scheduler dies) until a server dies and
  /// this one gets its rank, or the job ends: then it returns nullopt.
  std::optional<welcome> stand_by(const hello& h) { return join_until(h, clock::time_point::max()); }

  /// Sends the scheduler a frame of `type` (a worker's or server's part in an elastic join).
  void tell(wire::msg type, std::uint64_t round, std::vector<std::byte> payload = {}) {
    auto body = std::make_shared<std::vector<std::byte>>(std::move(payload));
    wire::header h;
    h.type = type;
    h.round = round;
    link_->send(h, *body, [body] {});
  }

  /// The scheduler's next frame of `type`, waiting until `deadline`. Throws
  /// `communicator_error` naming `what` when none comes, or the cluster failed first.
  frame expect(wire::msg type, clock::time_point deadline, const std::string& what) {
    std::string why;
    auto f = inbox_->take({type, wire::msg::node_failed}, deadline, why);
    if (!f)
      throw communicator_error(
          fmt::format("{} did not come from the scheduler {}: {}", what, link_->peer(), why));
    if (f->header.type == wire::msg::node_failed)
      throw communicator_error("the cluster failed while joining: " + f->text());
    return std::move(*f);
  }

  /// Blocks until every worker entered barrier number `n`, or the deadline.
  void barrier(std::uint64_t n, std::chrono::milliseconds timeout) {
    wire::header head;
    head.type = wire::msg::barrier;
    head.round = n;
    link_->send(head, {}, {});
    std::string why;
    auto deadline = clock::now() + timeout;
    for (;;) {
      auto f = inbox_->take({wire::msg::barrier_release, wire::msg::node_failed}, deadline, why);
      if (!f) {
        throw communicator_error(fmt::format(
            "barrier {} did not complete within {} ms (BYTEPS_OP_TIMEOUT_MS): {}; the scheduler "
            "is {}",
            n, timeout.count(), why, link_->peer()));
      }
      if (f->header.type == wire::msg::node_failed)
        throw communicator_error("barrier failed: " + f->text());
      if (f->header.round == n) return;
    }
  }

  /// Blocks until the scheduler says the job is over. Throws when the cluster fails first.
  void wait_for_shutdown() {
    std::string why;
    auto f = inbox_->take({wire::msg::shutdown, wire::msg::node_failed}, clock::time_point::max(),
                          why);
    if (!f) throw communicator_error("lost the scheduler " + link_->peer() + ": " + why);
    if (f->header.type == wire::msg::node_failed) throw communicator_error(f->text());
    inbox_->expect_close();
    heartbeat_.stop();
  }

  /// Leaves on purpose; `done` runs once the bye left this node (or the link is gone). A
  /// non-empty `failure` says the node leaves because it failed: the scheduler then fails the
  /// job with it, so every node exits with an error.
  void bye(std::function<void()> done, std::string failure = {}) {
    inbox_->expect_close();
    heartbeat_.stop();
    wire::header head;
    head.type = wire::msg::bye;
    auto body = std::make_shared<std::string>(std::move(failure));
    link_->send(head, wire::as_bytes(*body), [body, done = std::move(done)] {
      if (done) done();
    });
  }

  void close() { link_->close(); }

  /// Stops the heartbeats (idempotent; not from the failure callback): once it returns, no
  /// failure comes from them, and after the transport stops none comes at all. A node stops
  /// them before it frees what its failure callback uses (a constructor that throws, say).
  void stop_heartbeats() { heartbeat_.stop(); }

  /// Gives the link up for `why` without a word to the scheduler (a simulated crash, in tests):
  /// waiters wake, and the failure callback runs.
  void abandon(const std::string& why) {
    heartbeat_.stop();
    link_->close();
    inbox_->fail_now(why);
  }

 private:
  std::optional<welcome> join_until(const hello& h, clock::time_point deadline) {
    // The scheduler reads the hello and beats at once, then answers the clock probe behind
    // it. Until then a flood may still get this connection closed (gate.hpp), and a scheduler too busy to
    // read it within BYTEPS_HELLO_TIMEOUT_MS closes it: a close before the answer, with nothing
    // said, means the hello was lost, so it goes again on a fresh connection, until
    // BYTEPS_CONNECT_TIMEOUT_MS. The node hears of no failure meanwhile, however slow the
    // scheduler is to answer.
    const auto hello_deadline = clock::now() + cfg_.connect_timeout;
    std::optional<frame> f;
    std::string why;
    for (;;) {
      hold_failures(true);
      const auto hello_sent = clock::now();
      send_hello(h);
      // Any frame since (the scheduler beats on reading the hello; a welcome, a refusal, a
      // failure or the end of the job say it read it too), or a close, whichever comes first;
      // with neither by the connect deadline, wait for the welcome as ever.
      bool closed = false;
      for (;;) {
        const auto slice = std::min(hello_deadline, clock::now() + std::chrono::milliseconds(10));
        if (inbox_->wait_heard_after(hello_sent, slice)) break;
        f = inbox_->take(
            {wire::msg::welcome, wire::msg::refuse, wire::msg::node_failed, wire::msg::shutdown},
            clock::now(), why);
        closed = !f && why != "timed out";  // take times out only while the link is open
        if (f || closed || clock::now() >= hello_deadline) break;
      }
      // Closed with nothing said: the hello was lost.
      if (!closed || clock::now() >= hello_deadline) break;
      log_.warn(
          "the scheduler at {} closed this node's connection before reading its hello (try "
          "{}); saying it again on a fresh connection (until BYTEPS_CONNECT_TIMEOUT_MS={})",
          link_->peer(), tries_, cfg_.connect_timeout.count());
      link_->close();
      connect_until(hello_deadline);
    }
    hold_failures(false);
    // Heartbeats both ways: the scheduler learns when this node stops (SIGSTOP, a hung host),
    // and this node learns when the scheduler does.
    heartbeat_.start(cfg_.heartbeat_interval, [this] { beat(); });
    if (!f)
      f = inbox_->take(
          {wire::msg::welcome, wire::msg::refuse, wire::msg::node_failed, wire::msg::shutdown},
          deadline, why);
    if (f && f->header.type == wire::msg::shutdown) {
      inbox_->expect_close();
      heartbeat_.stop();
      return std::nullopt;
    }
    if (!f) {
      throw communicator_error(fmt::format(
          "joining the cluster at the scheduler {} failed: {} (waited up to {} ms for {} workers "
          "and {} servers; BYTEPS_RENDEZVOUS_TIMEOUT_MS)",
          link_->peer(), why, cfg_.rendezvous_timeout.count(), cfg_.num_workers,
          cfg_.num_servers));
    }
    if (f->header.type == wire::msg::refuse) {
      inbox_->expect_close();
      throw usage_error("the scheduler refused this node: " + f->text());
    }
    if (f->header.type == wire::msg::node_failed)
      throw communicator_error("the cluster failed while joining: " + f->text());
    try {
      auto w = decode_welcome(f->payload);
      // The scheduler reads the probes after the hello, one frame of each link at a time, so
      // the answers may come after the welcome (the last node's always do): wait for them
      // (briefly), or a short job could write its
      // timeline before its clock offset was ever measured. Past the deadline it goes on: the
      // timeline then records how few samples it had (`clock_samples`).
      if (cfg_.trace_on)
        (void)inbox_->wait_clock_samples(connect_probes, clock::now() + cfg_.hello_timeout);
      return w;
    } catch (const wire::decode_error& e) {
      throw communicator_error(fmt::format("malformed welcome from the scheduler {}: {}",
                                           link_->peer(), e.what()));
    }
  }


  // A heartbeat that carries our clock in `round` is a clock probe: the scheduler answers it
  // with its own clock (NTP's exchange; detail/clock_sync.hpp). 0 asks for no answer.
  void probe_clock() {
    wire::header h;
    h.type = wire::msg::heartbeat;
    h.round = static_cast<std::uint64_t>(detail::steady_ns());
    link_->send(h, {}, {});
  }

  void beat() {
    if (cfg_.trace_on) {
      probe_clock();
    } else {
      wire::header h;
      h.type = wire::msg::heartbeat;
      link_->send(h, {}, {});
    }
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() -
                                                                        inbox_->last_heard());
    if (silent > cfg_.heartbeat_timeout) {
      inbox_->fail_now(fmt::format("the scheduler at {} stopped responding: nothing heard for "
                                   "{} ms (BYTEPS_HEARTBEAT_TIMEOUT_MS={})",
                                   link_->peer(), silent.count(), cfg_.heartbeat_timeout.count()));
      link_->close();
    }
  }

  // Connects and takes the scheduler's challenge, on fresh connections while it closes them
  // first or sends none in time, until `deadline`; each with a fresh inbox (the last one saw its
  // link close), which gets the node's notices and failure callback.
  void connect_until(clock::time_point deadline) {
    hello_backoff backoff;
    const auto limit = cfg_.connect_timeout.count();
    for (;;) {
      ++tries_;
      const auto left = std::max(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()),
          std::chrono::milliseconds(1));
      try {
        link_ = transport_.connect(cfg_.scheduler_host, cfg_.scheduler_port, left);
      } catch (const communicator_error& e) {
        throw communicator_error(fmt::format(
            "cannot reach the scheduler (DMLC_PS_ROOT_URI={}, DMLC_PS_ROOT_PORT={}){}: {}. Is it "
            "running? Raise BYTEPS_CONNECT_TIMEOUT_MS if it starts later.",
            cfg_.scheduler_host, cfg_.scheduler_port,
            tries_ == 1 ? std::string()
                        : fmt::format(" again after {} connection(s) it closed", tries_ - 1),
            e.what()));
      }
      inbox_ = std::make_shared<inbox>();
      inbox_->on_failure([relay = relay_, link = relay_->next()](const std::string& why) {
        relay->fail(link, why);
      });
      for (const auto& [type, f] : notices_) inbox_->on_notice(type, f);
      link_->start(inbox_);
      // The first try waits the whole hello timeout; later ones stop at the deadline too.
      auto challenge_by = clock::now() + cfg_.hello_timeout;
      if (tries_ > 1) challenge_by = std::min(challenge_by, deadline);
      std::string why;
      auto challenge = inbox_->take({wire::msg::challenge}, challenge_by, why);
      if (challenge && challenge->payload.size() == nonce_bytes) {
        std::copy(challenge->payload.begin(), challenge->payload.end(), nonce_.begin());
        return;
      }
      link_->close();
      if (challenge)  // a challenge of another size: no use trying again
        throw communicator_error(fmt::format(
            "the scheduler at {} sent a challenge of {} bytes (a nonce is {}); is it a byteps "
            "scheduler of this version?",
            link_->peer(), challenge->payload.size(), nonce_bytes));
      const auto pause = backoff.next();
      if (clock::now() + pause >= deadline)
        throw communicator_error(
            no_challenge_message("the scheduler", link_->peer(), tries_, cfg_.connect_timeout, why));
      log_.warn("the scheduler at {} sent no challenge on try {} ({}); trying again in {} ms "
                "(until BYTEPS_CONNECT_TIMEOUT_MS={})",
                link_->peer(), tries_, why, pause.count(), limit);
      std::this_thread::sleep_for(pause);
    }
  }

  // The hello on the current link, with the clock probes behind it (one, or connect_probes
  // when the timeline is on): the scheduler answers them only once it read the hello.
  void send_hello(const hello& h) {
    auto payload =
        std::make_shared<std::vector<std::byte>>(encode_proved(h, cfg_.job_token, nonce_));
    wire::header head;
    head.type = wire::msg::hello;
    link_->send(head, *payload, [payload] {});
    // Only now may anything else follow: a scheduler takes nothing before the hello.
    for (int i = 0; i < (cfg_.trace_on ? connect_probes : 1); ++i) probe_clock();
  }

  // While a hello waits for its answer, failures wait too; released, the current link's
  // first one (a report the scheduler sent meanwhile, or a close) goes on as any later one.
  void hold_failures(bool hold) {
    std::optional<std::string> waited;
    {
      std::lock_guard lock(relay_->mu);
      relay_->held = hold;
      if (!hold) waited = std::exchange(relay_->held_failure, std::nullopt);
    }
    if (waited) relay_->fail(relay_->current_link(), *waited);
  }

  // The node's failure callback, shared with every inbox this client made: only the current
  // link's failure reaches it, and none while a hello waits for its answer (a close then is a
  // lost hello, said again on a fresh link; a report waits until the hold ends). Unset until the
  // node asks; a failure before then is kept for it.
  struct failure_relay {
    std::mutex mu;
    std::function<void(const std::string&)> failure;
    std::optional<std::string> unheard;       // the first failure before the node asked
    std::optional<std::string> held_failure;  // the current link's first one while held
    // From the first connection until the hello is answered: a close before then (a flood, a
    // busy scheduler) loses the hello, which join_until says again on a fresh connection.
    bool held = true;
    std::uint64_t current = 0;  // the link whose failure counts
    std::uint64_t next() {
      std::lock_guard lock(mu);
      held_failure.reset();  // the last link's: a lost hello
      return ++current;
    }
    std::uint64_t current_link() {
      std::lock_guard lock(mu);
      return current;
    }
    void fail(std::uint64_t link, const std::string& why) {
      std::function<void(const std::string&)> f;
      {
        std::lock_guard lock(mu);
        if (link != current) return;
        if (held) {
          if (!held_failure) held_failure = why;
          return;
        }
        if (!failure) {
          if (!unheard) unheard = why;
          return;
        }
        f = failure;
      }
      f(why);
    }
  };

  static constexpr int connect_probes = 3;  // probes sent right after the hello (trace on)

  Config cfg_;
  T& transport_;
  logger log_;
  int tries_ = 0;  // connections to the scheduler so far
  std::shared_ptr<failure_relay> relay_ = std::make_shared<failure_relay>();
  std::vector<std::pair<wire::msg, std::function<void(const frame&)>>> notices_;
  std::shared_ptr<inbox> inbox_;
  std::shared_ptr<typename T::link> link_;
  nonce nonce_{};  // the scheduler's challenge
  detail::periodic_thread heartbeat_;  // last: stops before the link and inbox go
};

}  // namespace bps::rendezvous
