#pragma once
/// @file
/// `bps::worker::server_links`: a worker's links to the servers, one slot per server rank: who
/// it is, whether its link is up, and which generation of link it is (a replacement's link is
/// the next generation, so a late report from the old one is recognised and ignored).
///
/// Not thread-safe: the worker's mutex guards it. Sends never block, so they may be made under
/// that mutex.

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/rendezvous/handshake.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::worker {

/// A worker's view of one server.
template <class Link>
struct server_slot {
  std::shared_ptr<Link> link;
  std::string address;              ///< "host:port", for messages
  std::uint64_t generation = 0;     ///< which link to this rank (a replacement's is the next)
  bool link_closed = false;         ///< the current generation's link has reported on_close
  bool up = true;                   ///< false from a loss until the replacement is connected
  std::uint64_t latest_notice = 0;  ///< failover: the newest server_replaced for this rank
  std::chrono::steady_clock::time_point down_since;
  std::string down_reason;
};

template <Transport T>
class server_links {
 public:
  using link_ptr = std::shared_ptr<typename T::link>;
  using slot = server_slot<typename T::link>;

  std::size_t size() const noexcept { return slots_.size(); }
  slot& operator[](int server) { return slots_[static_cast<std::size_t>(server)]; }
  const slot& operator[](int server) const { return slots_[static_cast<std::size_t>(server)]; }
  bool known(int server) const noexcept {
    return server >= 0 && static_cast<std::size_t>(server) < slots_.size();
  }

  void add(slot s) { slots_.push_back(std::move(s)); }

  /// What a worker says in each `peer_hello`, and how long it tries.
  struct hello_terms {
    int machine = 0;     ///< this worker's rank (its machine)
    int local_rank = 0;  ///< its process on that machine
    std::string job_token;
    std::chrono::milliseconds hello_timeout{};    ///< each connection's wait for its challenge
    std::chrono::milliseconds connect_timeout{};  ///< all tries at one server
    const logger* log = nullptr;                  ///< says each try again (WARNING)
  };

  /// Connects to server `server` at `where` and says who this worker process is, proving the
  /// job's token for the server's challenge: servers admit this job's workers only
  /// (rendezvous/handshake.hpp); `receiver` then reads the link. A server may close a
  /// connection before its challenge (BYTEPS_MAX_PENDING_CONNECTIONS full: a flood, a port
  /// scan), or send none within the hello timeout: then the worker tries again on a fresh
  /// connection, pausing as `rendezvous::hello_backoff` says. `adopt(link)` runs before each
  /// connection starts, so the caller can find the link when it later closes; a failed try's
  /// close never reaches `receiver`. Returns the link that said hello; null as soon as `gone()`
  /// (the worker failed or closes; checked at least every 500 ms); throws `communicator_error`
  /// naming the server, the tries and the likely causes after `connect_timeout`
  /// (BYTEPS_CONNECT_TIMEOUT_MS) in all.
  template <class Adopt, class Gone>
  static link_ptr connect_and_hello(T& transport, const rendezvous::address& where, int server,
                                    const std::shared_ptr<transport::receiver>& receiver,
                                    const hello_terms& terms, Adopt&& adopt, Gone&& gone) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + terms.connect_timeout;
    const auto who = fmt::format("server {}", server);
    rendezvous::hello_backoff backoff;
    for (int attempts = 1;; ++attempts) {
      auto link = dial(transport, where, deadline, gone, [&](const std::string& e) {
        const auto limit = terms.connect_timeout.count();
        return attempts == 1
                   ? fmt::format("cannot reach {} within {} ms (BYTEPS_CONNECT_TIMEOUT_MS): {}",
                                 who, limit, e)
                   : fmt::format(
                         "cannot reach {} again after {} tries without a challenge, "
                         "within {} ms (BYTEPS_CONNECT_TIMEOUT_MS): {}",
                         who, attempts - 1, limit, e);
      });
      if (!link) return nullptr;
      adopt(link);
      // The first try waits the whole hello timeout; later ones stop at the deadline too.
      auto challenge_by = clock::now() + terms.hello_timeout;
      if (attempts > 1) challenge_by = std::min(challenge_by, deadline);
      const auto failed =
          rendezvous::try_peer_hello(*link, receiver, terms.machine, terms.local_rank,
                                     terms.job_token, challenge_by, settle(terms.hello_timeout));
      if (!failed) return link;
      link->close();
      if (gone()) return nullptr;
      const auto pause = backoff.next();
      if (clock::now() + pause >= deadline)
        throw communicator_error(rendezvous::no_challenge_message(who, link->peer(), attempts,
                                                                  terms.connect_timeout, *failed));
      if (terms.log != nullptr)
        terms.log->warn(
            "{} at {} took no hello on try {} ({}); trying again in {} ms (until "
            "BYTEPS_CONNECT_TIMEOUT_MS={})",
            who, link->peer(), attempts, *failed, pause.count(), terms.connect_timeout.count());
      std::this_thread::sleep_for(pause);
    }
  }

  /// Sends `bye`, carrying `failure` (empty: a clean exit), on each of `links` and through
  /// `bye_scheduler(on_sent)`, and waits (at most 5 s) until each has left.
  template <class ByeScheduler>
  static void say_bye(const std::vector<link_ptr>& links, const std::string& failure,
                      ByeScheduler&& bye_scheduler) {
    auto left = std::make_shared<std::atomic<int>>(static_cast<int>(links.size()) + 1);
    auto done = std::make_shared<std::promise<void>>();
    auto text = std::make_shared<std::string>(failure);
    std::function<void()> one_left = [left, done, text] {
      if (left->fetch_sub(1) == 1) done->set_value();
    };
    wire::header bye;
    bye.type = wire::msg::bye;
    for (auto& l : links) l->send(bye, wire::as_bytes(*text), one_left);
    bye_scheduler(one_left);
    done->get_future().wait_for(std::chrono::seconds(5));
  }

  /// A failing worker's last word to each server it still has, just before `close_all`: a bye
  /// carrying `why`, so that the server fails naming the cause (a lost server, the scheduler's
  /// report) instead of reporting this worker's link closing. A transport drops it with
  /// whatever the link still has queued at the close (a push being written); the server then
  /// reports the close, and the scheduler's report names the cause (this worker's bye to it).
  void say_failed(const std::string& why) {
    auto text = std::make_shared<std::string>(why);
    wire::header bye;
    bye.type = wire::msg::bye;
    for (auto& s : slots_)
      if (s.up) s.link->send(bye, wire::as_bytes(*text), [text] {});
  }

  /// The links that are up, for a last `bye`.
  std::vector<link_ptr> live() const {
    std::vector<link_ptr> links;
    for (const auto& s : slots_)
      if (s.up) links.push_back(s.link);
    return links;
  }

  /// Closing a link returns every payload the transport still holds (their on_sent run).
  void close_all() {
    for (auto& s : slots_) s.link->close();
  }

  /// Generation `generation` of `server`'s link reported its close.
  void closed(int server, std::uint64_t generation) {
    auto& s = (*this)[server];
    if (generation != s.generation) return;
    s.link_closed = true;
    closed_cv_.notify_all();
  }

  /// Waits, at most `limit`, until `server`'s current link reported its close; `lock` holds the
  /// worker's mutex. False if it did not within `limit`.
  bool wait_closed(std::unique_lock<std::mutex>& lock, int server,
                   std::chrono::milliseconds limit) {
    return closed_cv_.wait_for(lock, limit, [&] { return (*this)[server].link_closed; });
  }

  /// "2 partition(s) from server 0 at host:port, ..." for each server with a nonzero count.
  std::string describe_waiting(const std::vector<std::size_t>& by_server) const {
    std::string text;
    for (std::size_t s = 0; s < by_server.size() && s < slots_.size(); ++s)
      if (by_server[s] != 0)
        text += fmt::format("{}{} partition(s) from server {} at {}{}", text.empty() ? "" : ", ",
                            by_server[s], s, slots_[s].address,
                            slots_[s].up ? "" : " (lost; its replacement had not come)");
    return text;
  }

 private:
  // How long a worker watches a link after its hello for a close that means the server never
  // read it (rendezvous::try_peer_hello): long beside the moments a flood needs to push a
  // connection out, short beside a job's start (paid once per server).
  static std::chrono::milliseconds settle(std::chrono::milliseconds hello_timeout) {
    return std::min(hello_timeout / 10, std::chrono::milliseconds(50));
  }

  // Connects to `where` in tries of at most 500 ms, so that `gone()` ends the wait early
  // (null); throws `communicator_error` with `what(last error)` at `deadline`.
  template <class Gone, class What>
  static link_ptr dial(T& transport, const rendezvous::address& where,
                       std::chrono::steady_clock::time_point deadline, Gone& gone, What&& what) {
    using namespace std::chrono;
    for (;;) {
      const auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
      try {
        return transport.connect(where.host, where.port,
                                 std::clamp(left, milliseconds(1), milliseconds(500)));
      } catch (const communicator_error& e) {
        if (gone()) return nullptr;
        if (steady_clock::now() >= deadline) throw communicator_error(what(e.what()));
      }
    }
  }

  std::vector<slot> slots_;
  std::condition_variable closed_cv_;
};

}  // namespace bps::worker
