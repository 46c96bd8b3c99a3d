#pragma once
/// @file
/// `rendezvous::hello_gate`: what a listener (the scheduler, a server) does with connections
/// that have not proved themselves yet. On accept it hands out a `pending_hello` with a fresh
/// nonce, which the listener sends in a `challenge` frame (auth.hpp); `admit_and_challenge` does
/// both for an accepted link, and is what the scheduler and the servers call. The connection's
/// first frame must then be its hello, proving the job's token for that nonce. A connection that
/// sends nothing of the kind within `Config::hello_timeout` (BYTEPS_HELLO_TIMEOUT_MS) is closed.
///
/// At most `Config::max_pending_connections` (BYTEPS_MAX_PENDING_CONNECTIONS) wait for their
/// hello. When one more comes, the gate closes the silent one that has waited longest, not the
/// newcomer: a node of the job answers its challenge at once, while a flood's connections stay
/// silent, so whoever holds the limit full (a flood, a port scan, from any address, the nodes'
/// own included) cannot keep a node out. A connection whose bytes have arrived but are not read
/// yet is not silent (`transport::has_unread_bytes`): a listener slower than the flood (a loaded
/// machine, a sanitizer) would otherwise close a node whose hello is already waiting in its socket.
/// Only when every waiting connection has sent something does the oldest go. A node turned away
/// before its challenge tries again (rendezvous/client.hpp, rendezvous/handshake.hpp). Every
/// connection closed here is logged at WARNING with the peer's address and counted (`counts()`).
///
/// @par Thread Safety
/// Every member may be called from any thread. The timeouts run on the gate's own timer thread,
/// and an eviction on the thread that admits; `stop` (and the destructor) returns once neither
/// runs any more, and the `close` functions the gate was given must stay callable until then.

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/timer_thread.hpp"
#include "byteps/rendezvous/auth.hpp"
#include "byteps/transport/transport.hpp"
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

/// How many connections the gate closed before their hello, by reason.
struct gate_counts {
  /// the one that waited longest, closed for a newcomer past BYTEPS_MAX_PENDING_CONNECTIONS
  std::uint64_t evicted = 0;
  std::uint64_t timed_out = 0;     ///< no hello within BYTEPS_HELLO_TIMEOUT_MS
  std::uint64_t refused = 0;       ///< a bad first frame, a bad proof, a taken rank
  std::uint64_t closed_early = 0;  ///< closed by the peer before its hello
};

class hello_gate {
 public:
  hello_gate(const Config& cfg, const logger& log)
      : timeout_(cfg.hello_timeout), max_pending_(cfg.max_pending_connections), log_(log) {}
  hello_gate(const hello_gate&) = delete;
  hello_gate& operator=(const hello_gate&) = delete;
  ~hello_gate() { stop(); }

  /// Ends the timeouts (they run as cancelled: nothing is closed) and the evictions; returns
  /// once no `close` function runs any more.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    timer_.stop();
    std::lock_guard wait(evicting_);  // an eviction closing a connection now ends first
  }

  /// A connection from `peer` was accepted: its `pending_hello`, whose nonce the caller sends
  /// as a `challenge`, and which `close` ends when no hello came in time, or when it is the
  /// silent one (`heard_from` false; no `heard_from`: always silent) that has waited longest of
  /// `Config::max_pending_connections` and one more comes. Null once stopping: the caller
  /// closes it.
  BYTEPS_DECL std::shared_ptr<pending_hello> admit(const std::string& peer,
                                                   std::function<void()> close,
                                                   std::function<bool()> heard_from = {});

  /// The owner's name in the gate's lines from now on: a server learns its rank ("server 1")
  /// from the scheduler's welcome, after its listener already admits connections.
  void rename(std::string who) { log_.rename(std::move(who)); }

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

  /// What a listener (the scheduler, a server) does with each link it accepts: `admit` it
  /// (closed at once when the gate stopped; later when no hello comes in time, or when it waited
  /// longest and the limit is full); start it with the receiver that `make_receiver(ticket)`
  /// returns, which keeps the ticket to settle it on the link's first frame; then send the
  /// ticket's challenge.
  template <class Link, class MakeReceiver>
  void admit_and_challenge(const std::shared_ptr<Link>& l, MakeReceiver&& make_receiver) {
    auto ticket = admit(
        l->peer(),
        [weak = std::weak_ptr<Link>(l)] {
          if (auto x = weak.lock()) x->close();
        },
        [weak = std::weak_ptr<Link>(l)] {
          auto x = weak.lock();
          return x && transport::has_unread_bytes(*x);
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
  // One admitted connection, in admission order: the oldest silent one is evicted first.
  struct waiting {
    std::weak_ptr<pending_hello> ticket;
    std::function<void()> close;
    std::function<bool()> heard_from;  // empty: always silent
    detail::timer_thread::clock::time_point since;
    std::string peer;  // filled in for the one evicted, for the log
  };

  // Closes `t`'s connection when it has said no hello `timeout_` from now. One whose bytes
  // wait unread then is not silent but queued behind a busy reader (a flood, a sanitizer): it
  // gets another `timeout_`, as often as that holds; once the reader took its bytes, a partial
  // hello is silent again. False when stopping.
  BYTEPS_DECL bool arm_timeout(const std::shared_ptr<pending_hello>& t, std::function<void()> close,
                               std::function<bool()> heard_from);

  static long long waited_ms(const waiting& w) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               detail::timer_thread::clock::now() - w.since)
        .count();
  }

  // The connections still waiting, oldest first.
  BYTEPS_DECL std::vector<waiting> waiting_locked() const;

  // Settles `victim` as evicted, or the oldest connection still waiting when `victim` is null
  // or settled meanwhile, and takes it from the queue (its close not yet called); empty when
  // none waits (cannot happen while pending_ counts one). Settled tickets are dropped from the
  // queue as they reach its front, and all at once when it grows past twice the limit (many
  // passed behind an old one), so the queue stays short and each admit cheap.
  BYTEPS_DECL waiting evict_locked(const pending_hello* victim);

  void prune_locked() {
    while (!queue_.empty() && settled(queue_.front())) queue_.pop_front();
    if (queue_.size() > 2 * static_cast<std::size_t>(max_pending_) + 16)
      std::erase_if(queue_, [](const waiting& w) { return settled(w); });
  }

  static bool settled(const waiting& w) {
    auto ticket = w.ticket.lock();
    return !ticket || ticket->settled();
  }

  void done(std::uint64_t gate_counts::*counter) {
    std::lock_guard lock(mu_);
    --pending_;
    if (counter != nullptr) ++(counts_.*counter);
    prune_locked();
  }

  std::chrono::milliseconds timeout_;
  int max_pending_;
  logger log_;
  std::mutex evicting_;  // held while an eviction closes a connection; stop waits for it
  mutable std::mutex mu_;
  int pending_ = 0;
  bool stopped_ = false;
  std::deque<waiting> queue_;  // admission order; settled ones linger until pruned
  gate_counts counts_;
  detail::timer_thread timer_;  // last: stops first
};

}  // namespace bps::rendezvous

#if BYTEPS_INCLUDE_BODIES
#include "byteps/rendezvous/impl/gate.hpp"
#endif
