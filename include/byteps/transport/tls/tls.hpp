#pragma once
/// @file
/// `bps::transport::tls<tcp>`: the TCP transport with every connection inside TLS (Asio's SSL
/// stream over OpenSSL's libssl), both ends proving themselves by a certificate of the job's CA
/// (tls_context.hpp). Needs the `byteps::tls` target (libssl); not included by `byteps.hpp`.
///
///   using net = bps::transport::tls<bps::transport::tcp>;
///   bps::Communicator<net, bps::local::none> comm(cfg);   // cfg.tls_ca, tls_cert, tls_key set
///
/// Why TCP only: a transport's link carries frames, not bytes (transport.hpp), so TLS cannot sit
/// on top of any `Inner` without framing its records in frames and copying every payload; it
/// secures the byte stream under TCP's link instead (`basic_tcp_link<tls_stream>`, tls_link.hpp).
/// The parameter names that stream's transport, and `tls<tcp>` is the one there is.
///
/// A listener runs each accepted connection's handshake on its own strand under a deadline
/// (`options::handshake_timeout`); one that fails or is late is closed with a WARNING naming the
/// peer and OpenSSL's reason, and is never handed to the node. A connecting side's handshake
/// shares its connect deadline; a refused handshake is a `communicator_error` at once (another
/// try would be refused alike). After the handshake a link is TCP's, so frames, deadlines and
/// failures behave as over `transport::tcp`.

#include <fmt/core.h>

#include <asio/bind_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/ssl/context.hpp>
#include <asio/ssl/error.hpp>
#include <asio/ssl/stream_base.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <chrono>
#include <concepts>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/transport/tcp/tcp.hpp"
#include "byteps/transport/tcp/tcp_engine.hpp"
#include "byteps/transport/tcp/tcp_listeners.hpp"
#include "byteps/transport/tcp/tcp_socket.hpp"
#include "byteps/transport/tls/tls_context.hpp"
#include "byteps/transport/tls/tls_link.hpp"
#include "byteps/transport/tls/tls_options.hpp"
#include "byteps/transport/transport.hpp"

namespace bps::transport {

template <class Inner>
requires std::same_as<Inner, tcp>
class tls {
 public:
  static constexpr std::string_view name = "tls";
  using options = tls_options<typename Inner::options>;
  using link = tls_link;

  /// With the options the environment gave (`options::from(cfg)`).
  explicit tls(const Config& cfg) : tls(cfg, options::from(cfg)) {}
  /// Throws `usage_error` for options that are not valid, and for a CA, certificate or key
  /// file that cannot be read or used (naming the variable and the path).
  tls(const Config& cfg, const options& opts)
      : max_frame_(cfg.max_frame_bytes()),
        notsent_lowat_(opts.inner.notsent_lowat),
        handshake_timeout_(opts.handshake_timeout),
        max_handshakes_(opts.max_handshakes),
        log_(cfg.log, "tls"),
        ssl_(checked_context(opts)),
        engine_(opts.inner.io_threads, opts.inner.poll_before_sleep, log_) {}
  tls(const tls&) = delete;
  tls& operator=(const tls&) = delete;
  ~tls() { stop(); }

  std::uint16_t listen(const std::string& host, std::uint16_t port,
                       std::function<void(std::shared_ptr<link>)> on_accept);
  std::shared_ptr<link> connect(const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds timeout);
  void register_memory(std::span<std::byte>) noexcept {}  // as TCP: reads into any memory
  void stop();

 private:
  // An accepted connection in its handshake: the stream, its deadline, on their own strand.
  struct handshake {
    handshake(asio::ip::tcp::socket s, asio::ssl::context& ctx,
              asio::strand<asio::io_context::executor_type> st)
        : stream(std::move(s), ctx), strand(st), timer(st) {}
    tls_stream stream;
    asio::strand<asio::io_context::executor_type> strand;
    asio::steady_timer timer;
    std::string peer;
    bool late = false;     // the deadline passed first
    bool done = false;     // the handshake ended first
    bool evicted = false;  // closed for a newcomer (start_handshake)
  };

  static asio::ssl::context checked_context(const options& opts) {
    opts.validate();
    return make_tls_context(opts.ca, opts.cert, opts.key);
  }

  void start_handshake(asio::ip::tcp::socket socket,
                       const std::function<void(std::shared_ptr<link>)>& on_accept);
  void finish_handshake(const std::shared_ptr<handshake>& hs, std::error_code ec,
                        const std::function<void(std::shared_ptr<link>)>& on_accept);
  std::shared_ptr<link> adopt(tls_stream stream);

  std::size_t max_frame_;
  std::size_t notsent_lowat_;
  std::chrono::milliseconds handshake_timeout_;
  int max_handshakes_;
  logger log_;
  asio::ssl::context ssl_;
  tcp_engine<link> engine_;                           // after log_, which its listeners log to
  std::vector<std::weak_ptr<handshake>> handshakes_;  // accepted, handshake not done: under
                                                      // engine_'s lock
};

template <class Inner>
requires std::same_as<Inner, tcp> std::shared_ptr<tls_link> tls<Inner>::adopt(tls_stream stream) {
  tune_connection(stream.lowest_layer(), notsent_lowat_);
  return engine_.track(
      std::make_shared<link>(std::move(stream), max_frame_, log_, engine_.long_reads()));
}

template <class Inner>
requires std::same_as<Inner, tcp> std::uint16_t tls<Inner>::listen(
    const std::string& host, std::uint16_t port,
    std::function<void(std::shared_ptr<link>)> on_accept) {
  return engine_.listeners().listen(
      host, port, [this, on_accept = std::move(on_accept)](asio::ip::tcp::socket socket) {
        start_handshake(std::move(socket), on_accept);
      });
}

template <class Inner>
requires std::same_as<Inner, tcp>
void tls<Inner>::start_handshake(asio::ip::tcp::socket socket,
                                 const std::function<void(std::shared_ptr<link>)>& on_accept) {
  std::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  const std::string peer = ec ? std::string("unknown peer") : tcp_link::endpoint_text(remote);
  auto hs = std::make_shared<handshake>(std::move(socket), ssl_, asio::make_strand(engine_.io()));
  hs->peer = peer;
  // When the limit is full the oldest handshake goes, not the newcomer: a node of the job
  // finishes its handshake in a few round trips, a flood's connections never do, so whoever
  // holds the limit full cannot keep a node out (the node dials again if it was the oldest).
  std::shared_ptr<handshake> oldest;
  std::size_t in_progress = 0;
  const bool admitted = engine_.locked([&](bool stopped) {
    if (stopped) return false;
    std::erase_if(handshakes_, [](const std::weak_ptr<handshake>& w) { return w.expired(); });
    while (!oldest && static_cast<int>(handshakes_.size()) >= max_handshakes_) {
      in_progress = handshakes_.size();
      oldest = handshakes_.front().lock();
      handshakes_.erase(handshakes_.begin());
    }
    handshakes_.push_back(hs);
    return true;
  });
  if (!admitted) return;
  if (oldest) {
    log_.warn(
        "closing the TLS handshake from {} to admit a connection from {}: {} handshakes were in "
        "progress (BYTEPS_MAX_PENDING_CONNECTIONS), and a node of this job finishes its own at "
        "once; a flood or a port scan fills this limit",
        oldest->peer, peer, in_progress);
    asio::post(oldest->strand, [oldest] {
      if (oldest->done) return;
      oldest->evicted = true;
      std::error_code ignored;
      oldest->stream.lowest_layer().close(ignored);  // the handshake ends with an error
    });
  }
  asio::post(hs->strand, [this, hs, on_accept] {
    hs->timer.expires_after(handshake_timeout_);
    hs->timer.async_wait([hs](std::error_code e) {  // on hs->strand: the timer's executor
      if (e || hs->done) return;
      hs->late = true;
      std::error_code ignored;
      hs->stream.lowest_layer().close(ignored);  // the handshake ends with an error
    });
    hs->stream.async_handshake(
        asio::ssl::stream_base::server,
        asio::bind_executor(hs->strand, [this, hs, on_accept](std::error_code e) {
          finish_handshake(hs, e, on_accept);
        }));
  });
}

template <class Inner>
requires std::same_as<Inner, tcp>
void tls<Inner>::finish_handshake(const std::shared_ptr<handshake>& hs, std::error_code ec,
                                  const std::function<void(std::shared_ptr<link>)>& on_accept) {
  hs->done = true;
  hs->timer.cancel();
  if (engine_.stopped()) return;  // closed by stop(): nothing to report
  if (hs->evicted) return;        // said when it was closed
  if (ec || hs->late) {
    const auto why = hs->late ? fmt::format("did not finish within {} ms (BYTEPS_HELLO_TIMEOUT_MS)",
                                            handshake_timeout_.count())
                              : "failed: " + tls_detail::tls_reason(ec, hs->stream.native_handle());
    log_.warn("dropping connection from {}: TLS handshake {}", hs->peer, why);
    std::error_code ignored;
    hs->stream.lowest_layer().close(ignored);
    return;
  }
  tcp_listeners::hand_over(log_, [&] { on_accept(adopt(std::move(hs->stream))); });
}

template <class Inner>
requires std::same_as<Inner, tcp> std::shared_ptr<tls_link> tls<Inner>::connect(
    const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
  auto attempt = [&](asio::ip::tcp::socket socket, auto deadline,
                     std::string& why) -> std::shared_ptr<link> {
    tls_stream stream(std::move(socket), ssl_);
    auto strand = asio::make_strand(engine_.io());
    std::promise<std::error_code> done;
    auto result = done.get_future();
    stream.async_handshake(
        asio::ssl::stream_base::client,
        asio::bind_executor(strand, [&done](std::error_code e) { done.set_value(e); }));
    if (result.wait_until(deadline) == std::future_status::timeout) {
      asio::post(strand, [&stream] {
        std::error_code ignored;
        stream.lowest_layer().close(ignored);
      });
      result.get();  // the handshake's handler has run: `stream` may go
      why = "the TLS handshake did not finish in time";
      return nullptr;
    }
    const auto ec = result.get();
    if (!ec) return adopt(std::move(stream));
    if (ec.category() == asio::error::get_ssl_category())
      throw communicator_error(fmt::format("TLS handshake with {}:{} failed: {}", host, port,
                                           tls_detail::tls_reason(ec, stream.native_handle())));
    why = "TLS handshake: " + ec.message();  // the connection failed under it: try again
    return nullptr;
  };
  return dial_until(engine_.io(), host, port, timeout, attempt);
}

template <class Inner>
requires std::same_as<Inner, tcp>
void tls<Inner>::stop() {
  engine_.stop([this] {  // under the engine's lock: the handshakes in progress end too
    for (auto& w : handshakes_) {
      if (auto hs = w.lock()) {
        asio::post(hs->strand, [hs] {
          std::error_code ignored;
          hs->timer.cancel();
          hs->stream.lowest_layer().close(ignored);
        });
      }
    }
  });
}

static_assert(bps::Transport<tls<tcp>>);

}  // namespace bps::transport
