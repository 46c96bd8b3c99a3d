#pragma once
/// @file
/// `bps::transport::tcp`: the TCP transport, on standalone Asio.
///
/// One `asio::io_context` per transport object (no process-wide state, so many nodes can live in
/// one process for tests), run by `options::io_threads` threads (tcp_options.hpp). A connection
/// is a `tcp::link` (tcp_link.hpp): how it reads and writes frames is said there. Listening
/// sockets accept through `tcp_listeners` (tcp_listeners.hpp), as `tls<tcp>`'s do.

#include <array>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/transport/tcp_link.hpp"
#include "byteps/transport/tcp_listeners.hpp"
#include "byteps/transport/tcp_options.hpp"
#include "byteps/transport/tcp_socket.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {

class tcp {
 public:
  static constexpr std::string_view name = "tcp";
  using options = tcp_options;
  using link = tcp_link;

  /// With the options the environment gave (`options::from(cfg)`).
  explicit tcp(const Config& cfg) : tcp(cfg, options::from(cfg)) {}
  tcp(const Config& cfg, const options& opts)
      : max_frame_(cfg.max_frame_bytes()),
        notsent_lowat_(opts.notsent_lowat),
        log_(cfg.log, "tcp"),
        // One thread: Asio then queues a handler's own posts without taking its lock.
        io_(opts.io_threads == 1 ? 1 : ASIO_CONCURRENCY_HINT_DEFAULT),
        work_(asio::make_work_guard(io_)) {
    opts.validate();
    for (int i = 0; i < opts.io_threads; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  tcp(const tcp&) = delete;
  tcp& operator=(const tcp&) = delete;
  ~tcp() { stop(); }

  std::uint16_t listen(const std::string& host, std::uint16_t port,
                       std::function<void(std::shared_ptr<link>)> on_accept);
  std::shared_ptr<link> connect(const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds timeout);
  void register_memory(std::span<std::byte>) noexcept {}  // TCP reads into any memory
  void stop();

 private:
  std::shared_ptr<link> adopt(asio::ip::tcp::socket socket);

  std::size_t max_frame_;
  std::size_t notsent_lowat_;
  logger log_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  bool stopped_ = false;
  tcp_listeners listeners_{io_, log_};
  std::vector<std::weak_ptr<link>> links_;
};

inline std::shared_ptr<tcp::link> tcp::adopt(asio::ip::tcp::socket socket) {
  tune_connection(socket, notsent_lowat_);
  auto l = std::make_shared<link>(std::move(socket), max_frame_, log_);
  std::lock_guard lock(mu_);
  std::erase_if(links_, [](const std::weak_ptr<link>& w) { return w.expired(); });
  links_.push_back(l);
  if (stopped_) l->close();
  return l;
}

inline std::uint16_t tcp::listen(const std::string& host, std::uint16_t port,
                                 std::function<void(std::shared_ptr<link>)> on_accept) {
  return listeners_.listen(
      host, port, [this, on_accept = std::move(on_accept)](asio::ip::tcp::socket socket) {
        tcp_listeners::hand_over(log_, [&] { on_accept(adopt(std::move(socket))); });
      });
}

inline std::shared_ptr<tcp::link> tcp::connect(const std::string& host, std::uint16_t port,
                                               std::chrono::milliseconds timeout) {
  return dial_until(io_, host, port, timeout,
                    [this](asio::ip::tcp::socket socket, auto /*deadline*/, std::string&) {
                      return adopt(std::move(socket));
                    });
}

inline void tcp::stop() {
  std::vector<std::shared_ptr<link>> links;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    listeners_.close();
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

static_assert(bps::Transport<tcp>);

}  // namespace bps::transport
