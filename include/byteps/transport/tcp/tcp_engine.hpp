#pragma once
/// @file
/// `bps::transport::tcp_engine<Link>`: what the TCP-based transports (`tcp`, `tls<tcp>`) are
/// made of besides how a connection becomes a link: one `asio::io_context` run by the
/// transport's I/O threads, its listening sockets (`tcp_listeners`), the links it made (each
/// closed when the transport stops, also one made after), and the one way to stop all of that.
/// A transport owns one and adds its handshake: none for `tcp`, TLS's for `tls<tcp>`.
///
/// @par Thread Safety
/// Every member may be called from any thread; `stop` also from one of the I/O threads' own
/// handlers (that thread then ends by itself).

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "byteps/core/log.hpp"
#include "byteps/transport/tcp/tcp_listeners.hpp"

namespace bps::transport {

template <class Link>
class tcp_engine {
 public:
  /// `log` is the transport's, which outlives this (a member of the transport, before it).
  /// `poll`: how long a thread polls after its last event before it sleeps (0: at once).
  tcp_engine(int io_threads, std::chrono::microseconds poll, const logger& log)
      // One thread: Asio then queues a handler's own posts without taking its lock.
      : io_(io_threads == 1 ? 1 : ASIO_CONCURRENCY_HINT_DEFAULT),
        work_(asio::make_work_guard(io_)),
        listeners_(io_, log) {
    for (int i = 0; i < io_threads; ++i) threads_.emplace_back([this, poll] { run(poll); });
  }
  tcp_engine(const tcp_engine&) = delete;
  tcp_engine& operator=(const tcp_engine&) = delete;
  ~tcp_engine() { stop(); }

  asio::io_context& io() noexcept { return io_; }

  /// The count its links keep of those in the middle of a long payload (tcp_link.hpp,
  /// `long_payload_bytes`): handed to each link the transport makes.
  const std::shared_ptr<std::atomic<int>>& long_reads() const noexcept { return long_reads_; }
  tcp_listeners& listeners() noexcept { return listeners_; }

  /// Keeps `link` to close when the transport stops; closes it at once if it stopped already.
  std::shared_ptr<Link> track(std::shared_ptr<Link> link) {
    std::lock_guard lock(mu_);
    std::erase_if(links_, [](const std::weak_ptr<Link>& w) { return w.expired(); });
    links_.push_back(link);
    if (stopped_) link->close();
    return link;
  }

  /// Runs `f(stopped)` under the lock that orders everything against `stop`: what a transport
  /// keeps of connections not yet links (their handshakes) goes under it too.
  template <class F>
  decltype(auto) locked(F&& f) {
    std::lock_guard lock(mu_);
    return std::forward<F>(f)(stopped_);
  }

  bool stopped() {
    std::lock_guard lock(mu_);
    return stopped_;
  }

  /// Closes the listeners, then, under the lock, runs `also()` (the transport closes what it
  /// keeps of its own), closes every link and ends the I/O threads. Idempotent.
  template <class Also>
  void stop(Also&& also) {
    std::vector<std::shared_ptr<Link>> links;
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      listeners_.close();
      also();
      for (auto& w : links_)
        if (auto l = w.lock()) links.push_back(std::move(l));
    }
    for (auto& l : links) l->close();
    links.clear();
    work_.reset();
    for (auto& t : threads_) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();  // stopped from one of our own callbacks: the thread ends by itself
      } else if (t.joinable()) {
        t.join();
      }
    }
    threads_.clear();
  }
  void stop() {
    stop([] {});
  }

 private:
  // A frame that comes soon after the last (an answer to a push just sent, the second worker's
  // push of a round) is read without the wake-up from epoll_wait, which costs tens of
  // microseconds; the thread yields while it polls, so a thread with work on its core runs.
  // While a link is in the middle of a long payload the thread sleeps between events instead:
  // the next is more of that payload, and polling for it only takes a core from others.
  void run(std::chrono::microseconds poll) {
    if (poll.count() == 0) return static_cast<void>(io_.run());
    using clock = std::chrono::steady_clock;
    auto last = clock::now();
    while (!io_.stopped()) {
      if (io_.poll() > 0) {
        last = clock::now();
      } else if (clock::now() - last < poll && long_reads_->load(std::memory_order_relaxed) == 0) {
        std::this_thread::yield();
      } else {
        io_.run_one();
        last = clock::now();
      }
    }
  }

  std::shared_ptr<std::atomic<int>> long_reads_ = std::make_shared<std::atomic<int>>(0);
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  bool stopped_ = false;
  tcp_listeners listeners_;  // after io_: its sockets run on it
  std::vector<std::weak_ptr<Link>> links_;
};

}  // namespace bps::transport
