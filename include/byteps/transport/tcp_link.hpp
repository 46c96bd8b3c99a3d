#pragma once
/// @file
/// `bps::transport::tcp_link` (`tcp::link`): one TCP connection of `transport::tcp`. It reads a
/// header, asks its receiver where the payload goes, and reads the payload straight there: in
/// one read, or in reads of the receiver's `progress_step` when it asks to hear of the payload's
/// progress (transport.hpp). Sends are queued and written as one gathered write of header plus
/// payload: no copy of the payload. A small frame sent while nothing is queued is written by the
/// sending thread itself, without blocking; the rest of it, and everything else that touches the
/// socket or the receiver, runs on the link's strand, so receiver callbacks come one at a time,
/// in frame order, and `on_sent` never runs inside `send`.
///
/// The class is `basic_tcp_link<Stream>` over the byte stream that carries the frames: the plain
/// socket for `transport::tcp` (`tcp_link`), Asio's SSL stream over that socket for
/// `transport::tls` (tls_link.hpp). Both are one template, so TLS adds no branch to TCP's path.

#include <fmt/core.h>

#include <algorithm>
#include <asio/any_io_executor.hpp>
#include <asio/bind_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/error.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/strand.hpp>
#include <asio/write.hpp>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/transport/frame_write.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

#include <sys/ioctl.h>

namespace bps::transport {

/// What a link needs of its stream beyond Asio's stream requirements (`lowest_layer()` is the
/// TCP socket of both). A stream that reports a peer's orderly close otherwise (TLS) specialises
/// it (tls_link.hpp).
template <class Stream>
struct stream_traits {
  /// The peer closed the connection (rather than it failing).
  static bool closed_by_peer(const std::error_code& ec) { return ec == asio::error::eof; }
};

template <class Stream>
class basic_tcp_link : public std::enable_shared_from_this<basic_tcp_link<Stream>> {
 public:
  using stream_type = Stream;

  basic_tcp_link(Stream socket, std::size_t max_frame, const logger& log)
      : socket_(std::move(socket)),
        strand_(asio::make_strand(socket_.get_executor())),
        max_frame_(max_frame),
        log_(log) {
    std::error_code ec;
    auto remote = socket_.lowest_layer().remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : endpoint_text(remote);
    auto local = socket_.lowest_layer().local_endpoint(ec);
    local_host_ = ec ? std::string("127.0.0.1") : local.address().to_string();
  }

  void start(std::shared_ptr<receiver> r) {
    asio::post(strand_, [self = this->shared_from_this(), r = std::move(r)]() mutable {
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
    outgoing frame{wire::encode(copy), payload, std::move(on_sent)};
    if (writing_) return queue_.push_back(std::move(frame));
    // Nothing queued and no write in flight: a small frame goes out from the caller's thread,
    // without first waking the I/O thread to write it (docs/performance.md, "Small frames
    // leave from the sending thread"). What the socket does not take now is written by the
    // strand as before.
    if constexpr (writes_from_caller) {
      if (frame_bytes(frame) <= max_caller_write_bytes) {
        frame.written = write_now(frame);
        if (frame.written == frame_bytes(frame)) {
          if (!frame.on_sent) return;
          caller_written_.push_back(std::move(frame.on_sent));
          if (caller_written_.size() == 1)
            asio::post(strand_, [self = this->shared_from_this()] { self->run_caller_written(); });
          return;
        }
      }
    }
    queue_.push_back(std::move(frame));
    writing_ = true;
    asio::post(strand_, [self = this->shared_from_this()] { self->write_front(); });
  }

  void close() {
    asio::post(strand_, [self = this->shared_from_this()] { self->fail("closed locally"); });
  }

  const std::string& peer() const noexcept { return peer_; }
  const std::string& local_host() const noexcept { return local_host_; }

  /// Whether the peer's bytes wait in the socket, not read yet: a connection that sent
  /// something is not silent, however slow the reader (rendezvous/gate.hpp).
  bool has_unread_bytes() {
    std::lock_guard lock(mu_);
    if (closed_) return false;  // fail() closes the descriptor only after setting closed_
    int bytes = 0;
    return ::ioctl(socket_.lowest_layer().native_handle(), FIONREAD, &bytes) == 0 && bytes > 0;
  }

  static std::string endpoint_text(const asio::ip::tcp::endpoint& e) {
    return e.address().to_string() + ":" + std::to_string(e.port());
  }

 private:
  struct outgoing {
    wire::header_bytes header;
    std::span<const std::byte> payload;
    sent_callback on_sent;
    std::size_t written = 0;  // bytes the caller's thread wrote already (send)
  };

  static std::size_t frame_bytes(const outgoing& f) noexcept {
    return f.header.size() + f.payload.size();
  }

  // The plain socket only: a TLS stream's state belongs to its strand.
  static constexpr bool writes_from_caller =
      can_write_from_caller && std::is_same_v<Stream, asio::ip::tcp::socket>;
  // Larger frames stay with the I/O thread: the caller holds the worker's lock while it sends,
  // and copying megabytes into the kernel under it would hold up the I/O thread's callbacks.
  static constexpr std::size_t max_caller_write_bytes = 64 * 1024;

  // Under mu_, with nothing queued and no write in flight (so no strand write can interleave,
  // and fail() cannot close the descriptor meanwhile). The bytes the socket took.
  std::size_t write_now(const outgoing& f) {
    return write_without_blocking(socket_.native_handle(), f.header, f.payload);
  }

  // ThreadSanitizer only, where it costs a lock per frame received. A frame the caller's thread
  // wrote (write_now, under mu_) may be answered into the memory it was sent from (a worker's
  // answer lands where its push came from). The answer came after the frame had gone, through
  // the network, which TSan cannot see, and its sendmsg interceptor marks the payload as read
  // only once the real sendmsg returned: without this, TSan reports the answer's read into that
  // memory racing with the send that caused it. Taking mu_ here, after the sender released it,
  // is the order TSan can see. A payload changed by another thread while it is being written is
  // still reported (tests/tsan/payload_race.cpp).
  void see_caller_writes_before_answers() {
#if defined(__SANITIZE_THREAD__)
    std::lock_guard lock(mu_);
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    std::lock_guard lock(mu_);
#endif
#endif
  }

  // Runs on the strand: the callbacks of frames the caller's thread wrote whole, in order.
  void run_caller_written() {
    std::vector<sent_callback> ready;
    {
      std::lock_guard lock(mu_);
      ready.swap(caller_written_);
    }
    for (auto& done : ready) done();
  }

  void read_header() {
    asio::async_read(socket_, asio::buffer(in_header_),
                     asio::bind_executor(strand_, [self = this->shared_from_this()](
                                                      std::error_code ec, std::size_t n) {
                       if (ec && n > 0)  // half a header: say so, whoever it was
                         return self->fail(fmt::format("{} after {} of a frame header's {} bytes",
                                                       self->io_reason(ec), n, wire::header_size));
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
    if (wire::is_transport_msg(current_.type) && !receiver_->peer_admitted()) {
      const auto why = fmt::format("a transport frame (type {:#x}) before its hello",
                                   static_cast<unsigned>(current_.type));
      log_.warn("dropping connection from {}: {}", peer_, why);
      return fail("protocol error: " + why);
    }
    if (wire::is_transport_msg(current_.type) && !receiver_->wants_transport_frames()) {
      skipped_.resize(current_.payload_bytes);  // another transport's handshake: not for us
      if (skipped_.empty()) return read_header();
      return asio::async_read(socket_, asio::buffer(skipped_),
                              asio::bind_executor(strand_, [self = this->shared_from_this()](
                                                               std::error_code ec, std::size_t) {
                                if (ec) return self->fail(self->io_reason(ec));
                                if (!self->failed_) self->read_header();
                              }));
    }
    see_caller_writes_before_answers();
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
                     asio::bind_executor(strand_, [self = this->shared_from_this(), dest](
                                                      std::error_code ec, std::size_t n) {
                       if (ec) return self->fail(self->half_frame(ec, n));
                       self->deliver(dest);
                     }));
  }

  // Cut-through: reads of `step` bytes, the receiver told after each one that leaves the frame
  // incomplete (its last bytes are on_message's). Only receivers that ask take this path, so the
  // others keep one read per payload.
  void read_in_steps(std::span<std::byte> dest, std::size_t got, std::size_t step) {
    asio::async_read(
        socket_, asio::buffer(dest.data() + got, std::min(step, dest.size() - got)),
        asio::bind_executor(strand_, [self = this->shared_from_this(), dest, got, step](
                                         std::error_code ec, std::size_t n) {
          if (ec) return self->fail(self->half_frame(ec, got + n));
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

  // Runs on the strand. Writes every queued frame (up to `max_gathered_frames`) in one gathered
  // write: the frames that queued while a write was in flight then cost the peer one wake-up,
  // not one per frame. The queue is a deque, so the frames' bytes stay put while senders append
  // behind them.
  void write_front() {
    std::size_t frames = 0;
    {
      std::lock_guard lock(mu_);
      if (closed_ || queue_.empty()) {
        writing_ = false;
        return;
      }
      gathered_.clear();
      frames = std::min(queue_.size(), max_gathered_frames);
      for (std::size_t i = 0; i < frames; ++i) {
        const outgoing& f = queue_[i];  // only the first may be partly written (send)
        for (const auto& part : unwritten(f.header, f.payload, f.written))
          if (part.size() != 0) gathered_.push_back(part);
      }
    }
    asio::async_write(socket_, gathered_,
                      asio::bind_executor(strand_, [self = this->shared_from_this(), frames](
                                                       std::error_code ec, std::size_t) {
                        if (ec) return self->write_failed(ec);
                        self->finish_written(frames);
                      }));
  }

  // Runs on the strand: the first `frames` queued frames left; their callbacks run, in order.
  void finish_written(std::size_t frames) {
    done_.clear();
    {
      std::lock_guard lock(mu_);
      // Frames the caller wrote whole went before any queued one: their callbacks first.
      for (auto& early : caller_written_) done_.push_back(std::move(early));
      caller_written_.clear();
      for (std::size_t i = 0; i < frames && !queue_.empty(); ++i) {
        done_.push_back(std::move(queue_.front().on_sent));
        queue_.pop_front();
      }
    }
    for (auto& done : done_)
      if (done) done();
    done_.clear();
    write_front();
  }

  // A read of the current frame's payload failed after `got` of its bytes.
  std::string half_frame(const std::error_code& ec, std::size_t got) const {
    return fmt::format("{} in the middle of a {} frame ({} of its {} payload bytes)", io_reason(ec),
                       wire::msg_name(current_.type), got, current_.payload_bytes);
  }

  std::string io_reason(const std::error_code& ec) const {
    if (stream_traits<Stream>::closed_by_peer(ec)) return "connection closed by " + peer_;
    if (ec == asio::error::operation_aborted) return "closed locally";
    return "connection to " + peer_ + " failed: " + ec.message();
  }

  // Runs on the strand. A write failed: the peer is gone or going, but what it sent before (a
  // bye after its last heartbeat, say) may still wait in the receive buffer, behind the frame
  // the receiver is handling. So stop writing and let the reader drain it: the end of stream or
  // error the reader then meets closes the link, with its own reason. (Closing here lost a
  // worker's bye at the scheduler: tests/unit/test_transport_last_words.cpp.)
  void write_failed(const std::error_code& ec) {
    if (failed_) return;
    if (ec == asio::error::operation_aborted) return fail(io_reason(ec));
    std::deque<outgoing> dropped;
    std::vector<sent_callback> written;
    {
      std::lock_guard lock(mu_);
      closed_ = true;  // send() now drops, as after a close
      writing_ = false;
      dropped.swap(queue_);
      written.swap(caller_written_);
    }
    std::error_code ignored;
    socket_.lowest_layer().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    log_.debug("write to {} failed ({}); reading what it sent before closing", peer_,
               ec.message());
    for (auto& done : written) done();
    for (auto& frame : dropped)
      if (frame.on_sent) frame.on_sent();
  }

  // Runs on the strand. Reports the first reason only.
  void fail(const std::string& reason) {
    if (failed_) return;
    failed_ = true;
    close_reason_ = reason;
    {
      std::lock_guard lock(mu_);
      closed_ = true;  // before the close: no caller's write (send) meets a closed descriptor
    }
    // Close before dropping the queue: a write in progress may still read the queued bytes
    // until the socket is closed.
    std::error_code ignored;
    socket_.lowest_layer().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket_.lowest_layer().close(ignored);
    std::deque<outgoing> dropped;
    std::vector<sent_callback> written;
    {
      std::lock_guard lock(mu_);
      dropped.swap(queue_);
      written.swap(caller_written_);
    }
    // Every callback, in send order, before the receiver hears of the close.
    for (auto& done : written) done();
    for (auto& frame : dropped)
      if (frame.on_sent) frame.on_sent();
    if (auto rx = std::move(receiver_)) rx->on_close(reason);
  }

  Stream socket_;
  asio::strand<asio::any_io_executor> strand_;
  std::size_t max_frame_;
  logger log_;
  std::string peer_;
  std::string local_host_;
  std::shared_ptr<receiver> receiver_;  // strand only; reset on close to break the cycle
  wire::header_bytes in_header_{};
  wire::header current_{};
  std::vector<std::byte> skipped_;  // payload of a transport frame nobody here handles
  bool failed_ = false;             // strand only
  std::string close_reason_;
  std::mutex mu_;
  std::deque<outgoing> queue_;
  static constexpr std::size_t max_gathered_frames = 64;  // 128 buffers, far below IOV_MAX
  std::vector<asio::const_buffer> gathered_;               // the strand's; the write in flight
  std::vector<sent_callback> done_;                        // the strand's
  std::vector<sent_callback> caller_written_;  // mu_: frames send() wrote whole, not yet told
  bool writing_ = false;
  bool closed_ = false;
};

/// A link of `transport::tcp`.
using tcp_link = basic_tcp_link<asio::ip::tcp::socket>;

}  // namespace bps::transport
