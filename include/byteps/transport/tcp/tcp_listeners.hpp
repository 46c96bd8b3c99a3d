#pragma once
/// @file
/// `tcp_listeners`: the listening sockets of one TCP-based transport (`transport::tcp`,
/// `transport::tls<tcp>`), each accepting connections until `close()`. What a transport does with
/// an accepted socket (wrap it in a link at once, or first run a TLS handshake on it) is the
/// `on_socket` it passes to `listen`; `hand_over` is how it then gives the link to the node.
///
/// @par Thread Safety
/// `listen` and `close` may be called from any thread; the accept loops run on the transport's
/// I/O threads, which must have ended before the `tcp_listeners` is destroyed.

#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/log.hpp"
#include "byteps/transport/tcp/tcp_socket.hpp"

namespace bps::transport {

class tcp_listeners {
 public:
  using on_socket = std::function<void(asio::ip::tcp::socket)>;

  /// `io` and `log` are the transport's, which outlive this (it is one of the transport's
  /// members); the log is held by reference so that its lines are the transport's own.
  tcp_listeners(asio::io_context& io, const logger& log) : io_(io), log_(log) {}
  tcp_listeners(const tcp_listeners&) = delete;
  tcp_listeners& operator=(const tcp_listeners&) = delete;

  /// Listens on `host:port` (0: any free port) and returns the port bound. Each connection
  /// accepted goes to `accepted` on an I/O thread; a failed accept is logged at WARNING and the
  /// socket goes on accepting, since one peer's failure says nothing of the next. Throws
  /// `communicator_error` as `open_acceptor` does.
  std::uint16_t listen(const std::string& host, std::uint16_t port, on_socket accepted) {
    auto acceptor = open_acceptor(io_, host, port);
    auto bound = acceptor->local_endpoint().port();
    {
      std::lock_guard lock(mu_);
      acceptors_.push_back(acceptor);
    }
    accept_next(std::move(acceptor), std::move(accepted));
    return bound;
  }

  /// Closes every listening socket, on an I/O thread (an acceptor is not thread-safe, and its
  /// pending accept runs there); their loops end there with `operation_aborted`.
  void close() {
    std::lock_guard lock(mu_);
    for (auto& a : acceptors_) {
      asio::post(io_, [a] {
        std::error_code ignored;
        a->close(ignored);
      });
    }
  }

  /// Runs `give` (make the link, hand it to the node's accept callback). What it throws is
  /// logged at ERROR and ends that connection only: it is on an I/O thread, where an exception
  /// would end the whole process.
  template <class Give>
  static void hand_over(const logger& log, Give&& give) {
    try {
      std::forward<Give>(give)();
    } catch (const std::exception& e) {
      log.error("accepting a connection failed: {}", e.what());
    }
  }

 private:
  void accept_next(std::shared_ptr<asio::ip::tcp::acceptor> acceptor, on_socket accepted) {
    auto* raw = acceptor.get();
    raw->async_accept([this, acceptor = std::move(acceptor), accepted = std::move(accepted)](
                          std::error_code ec, asio::ip::tcp::socket socket) mutable {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
      if (!ec) {
        accepted(std::move(socket));
      } else {
        log_.warn("accept failed: {}", ec.message());
      }
      accept_next(std::move(acceptor), std::move(accepted));
    });
  }

  asio::io_context& io_;
  const logger& log_;
  std::mutex mu_;
  std::vector<std::shared_ptr<asio::ip::tcp::acceptor>> acceptors_;
};

}  // namespace bps::transport
