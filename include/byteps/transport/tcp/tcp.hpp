#pragma once
/// @file
/// `bps::transport::tcp`: the TCP transport, on standalone Asio.
///
/// One `asio::io_context` per transport object (no process-wide state, so many nodes can live in
/// one process for tests), run by `options::io_threads` threads (tcp_options.hpp), with the
/// listeners, the links and the stop that `tls<tcp>` shares (`tcp_engine`, tcp_engine.hpp). A
/// connection is a `tcp::link` (tcp_link.hpp): how it reads and writes frames is said there.

#include <asio/ip/tcp.hpp>
#include <memory>
#include <string>

#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/core/log.hpp"
#include "byteps/transport/tcp/tcp_engine.hpp"
#include "byteps/transport/tcp/tcp_link.hpp"
#include "byteps/transport/tcp/tcp_options.hpp"
#include "byteps/transport/tcp/tcp_socket.hpp"
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
  BYTEPS_DECL tcp(const Config& cfg, const options& opts);
  tcp(const tcp&) = delete;
  tcp& operator=(const tcp&) = delete;
  ~tcp() { stop(); }

  BYTEPS_DECL std::uint16_t listen(const std::string& host, std::uint16_t port,
                                   std::function<void(std::shared_ptr<link>)> on_accept);
  BYTEPS_DECL std::shared_ptr<link> connect(const std::string& host, std::uint16_t port,
                                            std::chrono::milliseconds timeout);
  void register_memory(std::span<std::byte>) noexcept {}  // TCP reads into any memory
  BYTEPS_DECL void stop();

  /// Links of this transport in the middle of a payload of `link::long_payload_bytes` or more,
  /// now: while any is, its I/O threads do not poll (for tests and logs).
  int long_reads_now() const noexcept {
    return engine_.long_reads()->load(std::memory_order_relaxed);
  }

 private:
  BYTEPS_DECL std::shared_ptr<link> adopt(asio::ip::tcp::socket socket);
  static int io_threads(const options& opts) {
    opts.validate();
    return opts.io_threads;
  }

  std::size_t max_frame_;
  std::size_t notsent_lowat_;
  logger log_;
  tcp_engine<link> engine_;  // after log_, which its listeners log to
};

static_assert(bps::Transport<tcp>);

}  // namespace bps::transport

#if BYTEPS_INCLUDE_BODIES
#include "byteps/transport/tcp/impl/tcp.hpp"
#endif
