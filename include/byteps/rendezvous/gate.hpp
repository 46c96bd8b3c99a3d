#pragma once
/// @file
/// `rendezvous::hello_gate`: what a listener (the scheduler, a server) does with connections
/// that have not proved themselves yet. On accept it refuses the connection when
/// `Config::max_pending_connections` others are still waiting to say hello, and otherwise hands
/// out a `pending_hello` with a fresh nonce, which the listener sends in a `challenge` frame
/// (auth.hpp); `admit_and_challenge` does both for an accepted link, and is what the scheduler and
/// the servers call. The connection's first frame must then be its hello, proving the job's
/// token for that nonce. A connection that sends nothing of the kind within `Config::hello_timeout`
/// (BYTEPS_HELLO_TIMEOUT_MS) is closed. Every refusal is logged at WARNING with the peer's
/// address and counted (`counts()`).
///
/// @par Thread Safety
/// Every member may be called from any thread. The timeouts run on the gate's own timer thread,
/// which its destructor stops; the `close` functions it was given must stay callable until then.

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include "byteps/core/config.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/timer_thread.hpp"
#include "byteps/rendezvous/auth.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::rendezvous {

/// One accepted connection until its hello: the nonce it must prove, and whether it is settled
/// (proved, refused, timed out or closed): exactly one of those happens.
class pending_hello {
 public:
  pending_hello(std::string peer, nonce n) : peer_(std::move(peer)), nonce_(n) {}
  const nonce& challenge() const noexcept { return nonce_; }
  const std::string& peer() const noexcept { return peer_; }
  bool settled() const noexcept { return settled_.load(); }
  /// True for the one caller that settles it.
  bool settle() noexcept { return !settled_.exchange(true); }

 private:
  std::string peer_;
  nonce nonce_;
  std::atomic<bool> settled_{false};
};

/// How many connections the gate refused, by reason.
struct gate_counts {
  std::uint64_t too_many_pending = 0;  ///< refused at accept (BYTEPS_MAX_PENDING_CONNECTIONS)
  std::uint64_t timed_out = 0;         ///< no hello within BYTEPS_HELLO_TIMEOUT_MS
  std::uint64_t refused = 0;           ///< a bad first frame, a bad proof, a taken rank
  std::uint64_t closed_early = 0;      ///< closed by the peer before its hello
};

class hello_gate {
 public:
  hello_gate(const Config& cfg, const logger& log)
      : timeout_(cfg.hello_timeout), max_pending_(cfg.max_pending_connections), log_(log) {}
  hello_gate(const hello_gate&) = delete;
  hello_gate& operator=(const hello_gate&) = delete;
  ~hello_gate() { stop(); }

  /// Ends the timeouts (they run as cancelled: nothing is closed).
  void stop() { timer_.stop(); }

  /// A connection from `peer` was accepted: its `pending_hello`, whose nonce the caller sends
  /// as a `challenge`, and which `close` ends when no hello came in time. Null when too many
  /// connections wait for their hello already: the caller closes it (logged and counted here).
  std::shared_ptr<pending_hello> admit(const std::string& peer, std::function<void()> close) {
    {
      std::lock_guard lock(mu_);
      if (pending_ >= max_pending_) {
        ++counts_.too_many_pending;
        log_.warn(
            "refusing the connection from {}: {} connections have not said hello yet "
            "(BYTEPS_MAX_PENDING_CONNECTIONS={})",
            peer, pending_, max_pending_);
        return nullptr;
      }
      ++pending_;
    }
    auto t = std::make_shared<pending_hello>(peer, fresh_nonce());
    const bool armed = timer_.post_at(
        detail::timer_thread::clock::now() + timeout_,
        [this, weak = std::weak_ptr<pending_hello>(t), close = std::move(close)](bool cancelled) {
          auto ticket = weak.lock();
          if (cancelled || !ticket || !ticket->settle()) return;
          done(&gate_counts::timed_out);
          log_.warn(
              "closing the connection from {}: no hello within {} ms "
              "(BYTEPS_HELLO_TIMEOUT_MS); a peer of this job says hello "
              "at once",
              ticket->peer(), timeout_.count());
          close();
        });
    if (!armed) {  // stopping: nobody is admitted any more
      done(nullptr);
      return nullptr;
    }
    return t;
  }

  /// `t` proved itself: it no longer counts as pending.
  void passed(pending_hello& t) {
    if (t.settle()) done(nullptr);
  }

  /// `t` is refused for `why` (its first frame was not a good hello); the caller closes it.
  void refused(pending_hello& t, const std::string& why) {
    if (!t.settle()) return;
    done(&gate_counts::refused);
    log_.warn("refusing the connection from {}: {}", t.peer(), why);
  }

  /// `t`'s link closed before its hello, for `reason`.
  void closed(pending_hello& t, const std::string& reason) {
    if (!t.settle()) return;
    done(&gate_counts::closed_early);
    log_.warn("the connection from {} closed before its hello: {}", t.peer(), reason);
  }

  gate_counts counts() const {
    std::lock_guard lock(mu_);
    return counts_;
  }

  /// What a listener (the scheduler, a server) does with each link it accepts: `admit` it,
  /// closing it at once when too many wait already and later when no hello comes in time; start
  /// it with the receiver that `make_receiver(ticket)` returns, which keeps the ticket to settle
  /// it on the link's first frame; then send the ticket's challenge.
  template <class Link, class MakeReceiver>
  void admit_and_challenge(const std::shared_ptr<Link>& l, MakeReceiver&& make_receiver) {
    auto ticket = admit(l->peer(), [weak = std::weak_ptr<Link>(l)] {
      if (auto x = weak.lock()) x->close();
    });
    if (!ticket) return l->close();
    l->start(std::forward<MakeReceiver>(make_receiver)(ticket));
    send_challenge(*l, *ticket);
  }

  /// Sends `t`'s challenge on `link` (any link type with `send`).
  template <class Link>
  static void send_challenge(Link& link, const pending_hello& t) {
    auto body = std::make_shared<nonce>(t.challenge());
    wire::header h;
    h.type = wire::msg::challenge;
    link.send(h, std::as_bytes(std::span(*body)), [body] {});
  }

 private:
  void done(std::uint64_t gate_counts::*counter) {
    std::lock_guard lock(mu_);
    --pending_;
    if (counter != nullptr) ++(counts_.*counter);
  }

  std::chrono::milliseconds timeout_;
  int max_pending_;
  logger log_;
  mutable std::mutex mu_;
  int pending_ = 0;
  gate_counts counts_;
  detail::timer_thread timer_;  // last: stops first
};

}  // namespace bps::rendezvous
