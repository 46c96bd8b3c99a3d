#pragma once
/// @file
/// `bps::transport::tcp`: the TCP transport, on standalone Asio.
///
/// One `asio::io_context` per transport object (no process-wide state, so many nodes can live in
/// one process for tests), run by `options::io_threads` threads (tcp_options.hpp). Each link
/// reads a header, asks its receiver where the payload goes, and reads the payload straight
/// there: in one read, or in reads of the receiver's `progress_step` when it asks to hear of the
/// payload's progress (transport.hpp). Sends are queued per link and written as one gathered
/// write of header plus payload: no copy of the payload.

#include <asio.hpp>

#include <array>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/transport/tcp_options.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {

class tcp {
 public:
  static constexpr std::string_view name = "tcp";
  using options = tcp_options;
  class link;

  /// With the options the environment gave (`options::from(cfg)`).
  explicit tcp(const Config& cfg) : tcp(cfg, options::from(cfg)) {}
  tcp(const Config& cfg, const options& opts)
      : max_frame_(cfg.max_frame_bytes()),
        log_(cfg.log, "tcp"),
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
  void accept_next(std::shared_ptr<asio::ip::tcp::acceptor> acceptor,
                   std::function<void(std::shared_ptr<link>)> on_accept);
  std::shared_ptr<link> adopt(asio::ip::tcp::socket socket);

  std::size_t max_frame_;
  logger log_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  bool stopped_ = false;
  std::vector<std::shared_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::vector<std::weak_ptr<link>> links_;
};

class tcp::link : public std::enable_shared_from_this<tcp::link> {
 public:
  link(asio::ip::tcp::socket socket, std::size_t max_frame, const logger& log)
      : socket_(std::move(socket)),
        strand_(asio::make_strand(socket_.get_executor())),
        max_frame_(max_frame),
        log_(log) {
    std::error_code ec;
    auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : endpoint_text(remote);
    auto local = socket_.local_endpoint(ec);
    local_host_ = ec ? std::string("127.0.0.1") : local.address().to_string();
  }

  void start(std::shared_ptr<receiver> r) {
    asio::post(strand_, [self = shared_from_this(), r = std::move(r)]() mutable {
      self->receiver_ = std::move(r);
      if (self->failed_) {
        auto rx = std::move(self->receiver_);
        rx->on_close(self->close_reason_);
        return;
      }
      self->read_header();
    });
  }

  void send(const wire::header& h, std::span<const std::byte> payload, sent_callback on_sent) {
    wire::header copy = h;
    copy.payload_bytes = payload.size();
    std::lock_guard lock(mu_);
    if (closed_) {
      // Still exactly once, and never inside send(): the caller may hold its own lock.
      if (on_sent) asio::post(strand_, std::move(on_sent));
      return;
    }
    queue_.push_back(outgoing{wire::encode(copy), payload, std::move(on_sent)});
    if (!writing_) {
      writing_ = true;
      asio::post(strand_, [self = shared_from_this()] { self->write_front(); });
    }
  }

  void close() {
    asio::post(strand_, [self = shared_from_this()] { self->fail("closed locally"); });
  }

  const std::string& peer() const noexcept { return peer_; }
  const std::string& local_host() const noexcept { return local_host_; }

  static std::string endpoint_text(const asio::ip::tcp::endpoint& e) {
    return e.address().to_string() + ":" + std::to_string(e.port());
  }

 private:
  struct outgoing {
    wire::header_bytes header;
    std::span<const std::byte> payload;
    sent_callback on_sent;
  };

  void read_header() {
    asio::async_read(socket_, asio::buffer(in_header_),
                     asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec,
                                                                              std::size_t) {
                       if (ec) return self->fail(self->io_reason(ec));
                       self->on_header();
                     }));
  }

  void on_header() {
    if (failed_) return;  // a read that completed just before the link was closed
    auto decoded = wire::decode(in_header_, max_frame_);
    if (!decoded) {
      log_.warn("dropping connection from {}: {}", peer_, decoded.reason);
      return fail("protocol error: " + decoded.reason);
    }
    current_ = decoded.value;
    std::string reason;
    std::span<std::byte> dest;
    if (wire::is_transport_msg(current_.type) && !receiver_->wants_transport_frames()) {
      skipped_.resize(current_.payload_bytes);  // another transport's handshake: not for us
      if (skipped_.empty()) return read_header();
      return asio::async_read(
          socket_, asio::buffer(skipped_),
          asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec,
                                                                   std::size_t) {
            if (ec) return self->fail(self->io_reason(ec));
            if (!self->failed_) self->read_header();
          }));
    }
    std::size_t step = 0;
    try {
      dest = receiver_->payload_destination(current_, reason);
      if (!dest.empty() && dest.size() == current_.payload_bytes)
        step = receiver_->progress_step(current_);
    } catch (const std::exception& e) {
      reason = e.what();
      dest = {};  // a receiver that failed to answer refuses the frame
    }
    if (dest.size() != current_.payload_bytes) {
      if (reason.empty()) reason = "no place for the payload";
      log_.warn("dropping connection from {}: {} frame refused: {}", peer_,
                wire::msg_name(current_.type), reason);
      return fail("protocol error: " + reason);
    }
    if (dest.empty()) return deliver({});
    if (step != 0 && dest.size() > step) return read_in_steps(dest, 0, step);
    asio::async_read(socket_, asio::buffer(dest.data(), dest.size()),
                     asio::bind_executor(strand_, [self = shared_from_this(), dest](
                                                      std::error_code ec, std::size_t) {
                       if (ec) return self->fail(self->io_reason(ec));
                       self->deliver(dest);
                     }));
  }

  // Cut-through: reads of `step` bytes, the receiver told after each one that leaves the frame
  // incomplete (its last bytes are on_message's). Only receivers that ask take this path, so the
  // others keep one read per payload.
  void read_in_steps(std::span<std::byte> dest, std::size_t got, std::size_t step) {
    asio::async_read(
        socket_, asio::buffer(dest.data() + got, std::min(step, dest.size() - got)),
        asio::bind_executor(strand_, [self = shared_from_this(), dest, got, step](
                                         std::error_code ec, std::size_t n) {
          if (ec) return self->fail(self->io_reason(ec));
          if (self->failed_) return;  // closed while the read completed: no receiver any more
          if (got + n == dest.size()) return self->deliver(dest);
          if (self->call_receiver([&] { self->receiver_->on_progress(self->current_, got + n); }))
            self->read_in_steps(dest, got + n, step);
        }));
  }

  void deliver(std::span<std::byte> payload) {
    if (failed_) return;
    if (call_receiver([&] { receiver_->on_message(current_, payload); })) read_header();
  }

  // False when the link is closed after the call: the receiver threw (a protocol error, for the
  // peer sent what it cannot take) or closed it.
  template <class F>
  bool call_receiver(F&& call) {
    try {
      call();
    } catch (const std::exception& e) {
      log_.warn("dropping connection from {}: handling a {} frame failed: {}", peer_,
                wire::msg_name(current_.type), e.what());
      fail(std::string("protocol error: ") + e.what());
    }
    return !failed_;
  }

  void write_front() {
    outgoing* front;
    {
      std::lock_guard lock(mu_);
      if (closed_ || queue_.empty()) {
        writing_ = false;
        return;
      }
      front = &queue_.front();
    }
    std::array<asio::const_buffer, 2> buffers{
        asio::buffer(front->header),
        asio::buffer(front->payload.data(), front->payload.size())};
    asio::async_write(socket_, buffers,
                      asio::bind_executor(strand_, [self = shared_from_this()](std::error_code ec,
                                                                               std::size_t) {
                        if (ec) return self->fail(self->io_reason(ec));
                        sent_callback done;
                        {
                          std::lock_guard lock(self->mu_);
                          if (self->queue_.empty()) return;
                          done = std::move(self->queue_.front().on_sent);
                          self->queue_.pop_front();
                        }
                        if (done) done();
                        self->write_front();
                      }));
  }

  std::string io_reason(const std::error_code& ec) const {
    if (ec == asio::error::eof) return "connection closed by " + peer_;
    if (ec == asio::error::operation_aborted) return "closed locally";
    return "connection to " + peer_ + " failed: " + ec.message();
  }

  // Runs on the strand. Reports the first reason only.
  void fail(const std::string& reason) {
    if (failed_) return;
    failed_ = true;
    close_reason_ = reason;
    // Close before dropping the queue: a write in progress may still read the queued bytes
    // until the socket is closed.
    std::error_code ignored;
    socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    std::deque<outgoing> dropped;
    {
      std::lock_guard lock(mu_);
      closed_ = true;
      dropped.swap(queue_);
    }
    for (auto& frame : dropped)
      if (frame.on_sent) frame.on_sent();
    if (auto rx = std::move(receiver_)) rx->on_close(reason);
  }

  asio::ip::tcp::socket socket_;
  asio::strand<asio::any_io_executor> strand_;
  std::size_t max_frame_;
  logger log_;
  std::string peer_;
  std::string local_host_;
  std::shared_ptr<receiver> receiver_;  // strand only; reset on close to break the cycle
  wire::header_bytes in_header_{};
  wire::header current_{};
  std::vector<std::byte> skipped_;  // payload of a transport frame nobody here handles
  bool failed_ = false;  // strand only
  std::string close_reason_;
  std::mutex mu_;
  std::deque<outgoing> queue_;
  bool writing_ = false;
  bool closed_ = false;
};

inline std::shared_ptr<tcp::link> tcp::adopt(asio::ip::tcp::socket socket) {
  std::error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  auto l = std::make_shared<link>(std::move(socket), max_frame_, log_);
  std::lock_guard lock(mu_);
  std::erase_if(links_, [](const std::weak_ptr<link>& w) { return w.expired(); });
  links_.push_back(l);
  if (stopped_) l->close();
  return l;
}

inline std::uint16_t tcp::listen(const std::string& host, std::uint16_t port,
                                 std::function<void(std::shared_ptr<link>)> on_accept) {
  std::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    asio::ip::tcp::resolver resolver(io_);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty())
      throw communicator_error(fmt::format("cannot listen on {}:{}: cannot resolve '{}': {}", host,
                                           port, host, ec.message()));
    address = results.begin()->endpoint().address();
  }
  auto acceptor = std::make_shared<asio::ip::tcp::acceptor>(io_);
  asio::ip::tcp::endpoint endpoint(address, port);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw communicator_error(fmt::format("cannot listen on {}:{}: {}", host, port, ec.message()));
  auto bound = acceptor->local_endpoint().port();
  {
    std::lock_guard lock(mu_);
    acceptors_.push_back(acceptor);
  }
  accept_next(acceptor, std::move(on_accept));
  return bound;
}

inline void tcp::accept_next(std::shared_ptr<asio::ip::tcp::acceptor> acceptor,
                             std::function<void(std::shared_ptr<link>)> on_accept) {
  auto* raw = acceptor.get();
  raw->async_accept([this, acceptor = std::move(acceptor), on_accept = std::move(on_accept)](
                        std::error_code ec, asio::ip::tcp::socket socket) mutable {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (!ec) {
      try {
        on_accept(adopt(std::move(socket)));
      } catch (const std::exception& e) {
        log_.error("accepting a connection failed: {}", e.what());
      }
    } else {
      log_.warn("accept failed: {}", ec.message());
    }
    accept_next(std::move(acceptor), std::move(on_accept));
  });
}

inline std::shared_ptr<tcp::link> tcp::connect(const std::string& host, std::uint16_t port,
                                               std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  std::string last_error = "timed out";
  while (clock::now() < deadline) {
    std::error_code ec;
    asio::ip::tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (!ec) {
      asio::ip::tcp::socket socket(io_);
      std::promise<std::error_code> done;
      auto result = done.get_future();
      asio::async_connect(socket, endpoints,
                          [&done](std::error_code e, const asio::ip::tcp::endpoint&) {
                            done.set_value(e);
                          });
      if (result.wait_until(deadline) == std::future_status::timeout) {
        asio::post(io_, [&socket] {
          std::error_code ignored;
          socket.cancel(ignored);
        });
        ec = result.get();
        last_error = "timed out";
      } else {
        ec = result.get();
      }
      if (!ec) return adopt(std::move(socket));
      if (ec != asio::error::operation_aborted) last_error = ec.message();
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

inline void tcp::stop() {
  std::vector<std::shared_ptr<link>> links;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& a : acceptors_) {
      asio::post(io_, [a] {
        std::error_code ignored;
        a->close(ignored);
      });
    }
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
