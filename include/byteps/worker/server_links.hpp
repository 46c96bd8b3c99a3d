#pragma once
/// @file
/// `bps::worker::server_links`: a worker's links to the servers, one slot per server rank: who
/// it is, whether its link is up, and which generation of link it is (a replacement's link is
/// the next generation, so a late report from the old one is recognised and ignored).
///
/// Not thread-safe: the worker's mutex guards it. Sends never block, so they may be made under
/// that mutex.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "byteps/core/error.hpp"
#include "byteps/rendezvous/handshake.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/transport/transport.hpp"

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

  /// Connects to each of `servers` in rank order, each within `timeout`, and hands the slot to
  /// `added(slot&, rank)` (which starts its link and `add`s it). Throws `communicator_error`
  /// naming the server it cannot reach.
  template <class Added>
  static void connect_all(T& transport, const std::vector<rendezvous::address>& servers,
                          std::chrono::milliseconds timeout, Added&& added) {
    for (std::size_t i = 0; i < servers.size(); ++i) {
      slot s;
      s.address = fmt::format("{}:{}", servers[i].host, servers[i].port);
      try {
        s.link = transport.connect(servers[i].host, servers[i].port, timeout);
      } catch (const communicator_error& e) {
        throw communicator_error(fmt::format("cannot reach server {}: {}", i, e.what()));
      }
      added(s, static_cast<int>(i));
    }
  }

  /// Sends `bye` on each of `links` and through `bye_scheduler(on_sent)`, and waits (at most
  /// 5 s) until each has left.
  template <class ByeScheduler>
  static void say_bye(const std::vector<link_ptr>& links, ByeScheduler&& bye_scheduler) {
    auto left = std::make_shared<std::atomic<int>>(static_cast<int>(links.size()) + 1);
    auto done = std::make_shared<std::promise<void>>();
    std::function<void()> one_left = [left, done] {
      if (left->fetch_sub(1) == 1) done->set_value();
    };
    wire::header bye;
    bye.type = wire::msg::bye;
    for (auto& l : links) l->send(bye, {}, one_left);
    bye_scheduler(one_left);
    done->get_future().wait_for(std::chrono::seconds(5));
  }

  /// Starts reading `link` with `receiver`, takes the server's challenge and says who this
  /// worker process is (machine, local rank), proving the job's token for that challenge:
  /// servers admit this job's workers only (rendezvous/handshake.hpp). Blocks until the hello
  /// left, at most `timeout`; throws `communicator_error` naming server `server` after it.
  static void hello(const link_ptr& link, std::shared_ptr<transport::receiver> receiver,
                    int machine, int local_rank, const std::string& job_token,
                    std::chrono::milliseconds timeout, int server) {
    rendezvous::say_peer_hello(*link, std::move(receiver), machine, local_rank, job_token,
                               timeout, fmt::format("server {}", server));
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
  std::vector<slot> slots_;
  std::condition_variable closed_cv_;
};

}  // namespace bps::worker
