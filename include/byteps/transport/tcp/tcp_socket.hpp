#pragma once
/// @file
/// The socket work that `transport::tcp` and `transport::tls` share: binding a listening socket
/// (`open_acceptor`) and dialling a peer with retries until a deadline (`dial_until`). What each
/// transport does with a connected socket (use it, or first run a TLS handshake on it) is the
/// caller's `adopt`.

#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <asio/connect.hpp>
#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/socket_base.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::transport {

/// Whether a connection from `local` to `remote` stays inside this host (a loopback address,
/// or the same address at both ends: the kernel routes it through its loopback device).
BYTEPS_DECL bool same_host_connection(const asio::ip::address& local,
                                      const asio::ip::address& remote) noexcept;

/// Sets Linux's TCP_NOTSENT_LOWAT of `bytes` on `socket`, where the kernel has it. A socket that
/// refuses it still works: ignored.
BYTEPS_DECL void set_notsent_lowat(asio::basic_socket<asio::ip::tcp>& socket, std::size_t bytes);

/// Sets what every byteps TCP connection uses on a connected socket: no Nagle delay (frames are
/// written whole, headers gathered with their payloads) and, for a connection that leaves the
/// host, TCP_NOTSENT_LOWAT of `notsent_lowat` bytes (0: left as the kernel has it; see
/// `tcp_options::notsent_lowat` for why). A connection within the host keeps the kernel's
/// default: there the short unsent queue only adds wake-ups (docs/performance.md, "Issue 12's
/// targets, with the defaults"). A socket that refuses an option still works: ignored.
BYTEPS_DECL void tune_connection(asio::basic_socket<asio::ip::tcp>& socket,
                                 std::size_t notsent_lowat);

/// A socket bound to `host:port` (0: any free port) and listening. Throws `communicator_error`
/// naming `host:port` and the reason.
BYTEPS_DECL std::shared_ptr<asio::ip::tcp::acceptor> open_acceptor(asio::io_context& io,
                                                                   const std::string& host,
                                                                   std::uint16_t port);

/// Connects to `host:port`, retrying every 100 ms until `timeout` passes, and returns
/// `adopt(socket, deadline, why)` for the first socket that connects. `adopt` returns the link,
/// or null after setting `why` to try again, or throws to give up at once. Throws
/// `communicator_error` naming `host:port`, the timeout and the last reason when time is up.
template <class Adopt>
auto dial_until(asio::io_context& io, const std::string& host, std::uint16_t port,
                std::chrono::milliseconds timeout, Adopt&& adopt) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  std::string last_error = "timed out";
  while (clock::now() < deadline) {
    std::error_code ec;
    asio::ip::tcp::resolver resolver(io);
    auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (!ec) {
      asio::ip::tcp::socket socket(io);
      std::promise<std::error_code> done;
      auto result = done.get_future();
      asio::async_connect(
          socket, endpoints,
          [&done](std::error_code e, const asio::ip::tcp::endpoint&) { done.set_value(e); });
      if (result.wait_until(deadline) == std::future_status::timeout) {
        asio::post(io, [&socket] {
          std::error_code ignored;
          socket.cancel(ignored);
        });
        ec = result.get();
        last_error = "timed out";
      } else {
        ec = result.get();
      }
      if (!ec) {
        if (auto link = adopt(std::move(socket), deadline, last_error)) return link;
      } else if (ec != asio::error::operation_aborted) {
        last_error = ec.message();
      }
    } else {
      last_error = "cannot resolve: " + ec.message();
    }
    auto pause = std::min<clock::duration>(std::chrono::milliseconds(100),
                                           std::max<clock::duration>(deadline - clock::now(), {}));
    std::this_thread::sleep_for(pause);
  }
  throw communicator_error(fmt::format("could not connect to {}:{} within {} ms: {}", host, port,
                                       timeout.count(), last_error));
}

}  // namespace bps::transport

#if BYTEPS_INCLUDE_BODIES
#include "byteps/transport/tcp/impl/tcp_socket.hpp"
#endif
