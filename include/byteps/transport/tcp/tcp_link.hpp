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
#include <sys/ioctl.h>

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
#include <atomic>
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

  /// `long_reads`: the transport's count of its links in the middle of a long payload (see
  /// `long_payload_bytes`), which its I/O threads read; null: none is kept.
  basic_tcp_link(Stream socket, std::size_t max_frame, const logger& log,
                 std::shared_ptr<std::atomic<int>> long_reads = nullptr);
  ~basic_tcp_link() { long_read(false); }

  /// A payload of this many bytes or more is long: while one is read, the next event on the
  /// link is only more of it, so the transport's I/O threads sleep between its reads instead of
  /// polling for it (tcp_engine.hpp). At 1 Gbit/s it takes 2 ms, ten times the poll window.
  static constexpr std::size_t long_payload_bytes = 256 * 1024;

  void start(std::shared_ptr<receiver> r);

  void send(const wire::header& h, std::span<const std::byte> payload, sent_callback on_sent);

  void close();

  const std::string& peer() const noexcept { return peer_; }
  const std::string& local_host() const noexcept { return local_host_; }

  /// Whether the peer's bytes wait in the socket, not read yet: a connection that sent
  /// something is not silent, however slow the reader (rendezvous/gate.hpp).
  bool has_unread_bytes();

  static std::string endpoint_text(const asio::ip::tcp::endpoint& e);

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
  std::size_t write_now(const outgoing& f);

  // ThreadSanitizer only, where it costs a lock per frame received. A frame the caller's thread
  // wrote (write_now, under mu_) may be answered into the memory it was sent from (a worker's
  // answer lands where its push came from). The answer came after the frame had gone, through
  // the network, which TSan cannot see, and its sendmsg interceptor marks the payload as read
  // only once the real sendmsg returned: without this, TSan reports the answer's read into that
  // memory racing with the send that caused it. Taking mu_ here, after the sender released it,
  // is the order TSan can see. A payload changed by another thread while it is being written is
  // still reported (tests/tsan/payload_race.cpp).
  void see_caller_writes_before_answers();

  // Runs on the strand: the callbacks of frames the caller's thread wrote whole, in order.
  void run_caller_written();

  void read_header();

  void on_header();

  // Cut-through: reads of `step` bytes, the receiver told after each one that leaves the frame
  // incomplete (its last bytes are on_message's). Only receivers that ask take this path, so the
  // others keep one read per payload.
  void read_in_steps(std::span<std::byte> dest, std::size_t got, std::size_t step);

  void deliver(std::span<std::byte> payload);

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
  void write_front();

  // Runs on the strand: the first `frames` queued frames left; their callbacks run, in order.
  void finish_written(std::size_t frames);

  // A read of the current frame's payload failed after `got` of its bytes.
  std::string half_frame(const std::error_code& ec, std::size_t got) const;

  std::string io_reason(const std::error_code& ec) const;

  // Runs on the strand. A write failed: the peer is gone or going, but what it sent before (a
  // bye after its last heartbeat, say) may still wait in the receive buffer, behind the frame
  // the receiver is handling. So stop writing and let the reader drain it: the end of stream or
  // error the reader then meets closes the link, with its own reason. (Closing here lost a
  // worker's bye at the scheduler: tests/unit/test_transport_last_words.cpp.)
  void write_failed(const std::error_code& ec);

  // Runs on the strand. Reports the first reason only.
  void fail(const std::string& reason);

  // Strand only (and the destructor): this link is, or is no longer, in the middle of a long
  // payload; counted once either way.
  void long_read(bool reading) noexcept {
    if (reading == in_long_read_ || !long_reads_) return;
    in_long_read_ = reading;
    long_reads_->fetch_add(reading ? 1 : -1, std::memory_order_relaxed);
  }

  Stream socket_;
  asio::strand<asio::any_io_executor> strand_;
  std::size_t max_frame_;
  logger log_;
  std::string peer_;
  std::string local_host_;
  std::shared_ptr<receiver> receiver_;  // strand only; reset on close to break the cycle
  receiver_capabilities caps_;          // receiver_'s, asked once (strand only)
  wire::header_bytes in_header_{};
  wire::header current_{};
  std::vector<std::byte> skipped_;  // payload of a transport frame nobody here handles
  bool failed_ = false;             // strand only
  std::shared_ptr<std::atomic<int>> long_reads_;
  bool in_long_read_ = false;  // strand only: counted in long_reads_
  std::string close_reason_;
  std::mutex mu_;
  std::deque<outgoing> queue_;
  static constexpr std::size_t max_gathered_frames = 64;  // 128 buffers, far below IOV_MAX
  std::vector<asio::const_buffer> gathered_;              // the strand's; the write in flight
  std::vector<sent_callback> done_;                       // the strand's
  std::vector<sent_callback> caller_written_;  // mu_: frames send() wrote whole, not yet told
  bool writing_ = false;
  bool closed_ = false;
};

/// A link of `transport::tcp`.
using tcp_link = basic_tcp_link<asio::ip::tcp::socket>;

}  // namespace bps::transport

#include "byteps/transport/tcp/impl/tcp_link.hpp"
