#pragma once
/// @file
/// The bodies of `basic_tcp_link` (transport/tcp/tcp_link.hpp), out of the class so that compiled
/// mode's explicit instantiation declaration of `tcp_link` keeps them out of every translation
/// unit but src/bodies.cpp's (docs/architecture.md, "Compiled mode"). Included at the end of
/// transport/tcp/tcp_link.hpp.

namespace bps::transport {

template <class Stream>
basic_tcp_link<Stream>::basic_tcp_link(Stream socket, std::size_t max_frame, const logger& log,
                                       std::shared_ptr<std::atomic<int>> long_reads)
    : socket_(std::move(socket)),
      strand_(asio::make_strand(socket_.get_executor())),
      max_frame_(max_frame),
      log_(log),
      long_reads_(std::move(long_reads)) {
  std::error_code ec;
  auto remote = socket_.lowest_layer().remote_endpoint(ec);
  peer_ = ec ? std::string("unknown peer") : endpoint_text(remote);
  auto local = socket_.lowest_layer().local_endpoint(ec);
  local_host_ = ec ? std::string("127.0.0.1") : local.address().to_string();
}

template <class Stream>
void basic_tcp_link<Stream>::start(std::shared_ptr<receiver> r) {
  asio::post(strand_, [self = this->shared_from_this(), r = std::move(r)]() mutable {
    self->receiver_ = std::move(r);
    self->caps_ = self->receiver_->capabilities();
    if (self->failed_) {
      auto rx = std::move(self->receiver_);
      self->caps_ = {};
      rx->on_close(self->close_reason_);
      return;
    }
    self->read_header();
  });
}

template <class Stream>
void basic_tcp_link<Stream>::send(const wire::header& h, std::span<const std::byte> payload,
                                  sent_callback on_sent) {
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

template <class Stream>
void basic_tcp_link<Stream>::close() {
  asio::post(strand_, [self = this->shared_from_this()] { self->fail("closed locally"); });
}

template <class Stream>
bool basic_tcp_link<Stream>::has_unread_bytes() {
  std::lock_guard lock(mu_);
  if (closed_) return false;  // fail() closes the descriptor only after setting closed_
  int bytes = 0;
  return ::ioctl(socket_.lowest_layer().native_handle(), FIONREAD, &bytes) == 0 && bytes > 0;
}

template <class Stream>
std::string basic_tcp_link<Stream>::endpoint_text(const asio::ip::tcp::endpoint& e) {
  return e.address().to_string() + ":" + std::to_string(e.port());
}

template <class Stream>
std::size_t basic_tcp_link<Stream>::write_now(const outgoing& f) {
  return write_without_blocking(socket_.native_handle(), f.header, f.payload);
}

template <class Stream>
void basic_tcp_link<Stream>::see_caller_writes_before_answers() {
#if defined(__SANITIZE_THREAD__)
  std::lock_guard lock(mu_);
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  std::lock_guard lock(mu_);
#endif
#endif
}

template <class Stream>
void basic_tcp_link<Stream>::run_caller_written() {
  std::vector<sent_callback> ready;
  {
    std::lock_guard lock(mu_);
    ready.swap(caller_written_);
  }
  for (auto& done : ready) done();
}

template <class Stream>
void basic_tcp_link<Stream>::read_header() {
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

template <class Stream>
void basic_tcp_link<Stream>::on_header() {
  if (failed_) return;  // a read that completed just before the link was closed
  auto decoded = wire::decode(in_header_, max_frame_);
  if (!decoded) {
    log_.warn("dropping connection from {}: {}", peer_, decoded.reason);
    return fail("protocol error: " + decoded.reason);
  }
  current_ = decoded.value;
  std::string reason;
  std::span<std::byte> dest;
  if (wire::is_transport_msg(current_.type) && !caps_.peer_admitted()) {
    const auto why = fmt::format("a transport frame (type {:#x}) before its hello",
                                 static_cast<unsigned>(current_.type));
    log_.warn("dropping connection from {}: {}", peer_, why);
    return fail("protocol error: " + why);
  }
  if (wire::is_transport_msg(current_.type) && !caps_.transport_frames) {
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
      step = caps_.progress_step(current_);
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
  if (dest.size() >= long_payload_bytes) long_read(true);
  if (step != 0 && dest.size() > step) return read_in_steps(dest, 0, step);
  asio::async_read(socket_, asio::buffer(dest.data(), dest.size()),
                   asio::bind_executor(strand_, [self = this->shared_from_this(), dest](
                                                    std::error_code ec, std::size_t n) {
                     if (ec) return self->fail(self->half_frame(ec, n));
                     self->deliver(dest);
                   }));
}

template <class Stream>
void basic_tcp_link<Stream>::read_in_steps(std::span<std::byte> dest, std::size_t got,
                                           std::size_t step) {
  asio::async_read(socket_, asio::buffer(dest.data() + got, std::min(step, dest.size() - got)),
                   asio::bind_executor(strand_, [self = this->shared_from_this(), dest, got, step](
                                                    std::error_code ec, std::size_t n) {
                     if (ec) return self->fail(self->half_frame(ec, got + n));
                     if (self->failed_)
                       return;  // closed while the read completed: no receiver any more
                     if (got + n == dest.size()) return self->deliver(dest);
                     if (self->call_receiver(
                             [&] { self->caps_.streaming->on_progress(self->current_, got + n); }))
                       self->read_in_steps(dest, got + n, step);
                   }));
}

template <class Stream>
void basic_tcp_link<Stream>::deliver(std::span<std::byte> payload) {
  long_read(false);
  if (failed_) return;
  if (call_receiver([&] { receiver_->on_message(current_, payload); })) read_header();
}

template <class Stream>
void basic_tcp_link<Stream>::write_front() {
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

template <class Stream>
void basic_tcp_link<Stream>::finish_written(std::size_t frames) {
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

template <class Stream>
std::string basic_tcp_link<Stream>::half_frame(const std::error_code& ec, std::size_t got) const {
  return fmt::format("{} in the middle of a {} frame ({} of its {} payload bytes)", io_reason(ec),
                     wire::msg_name(current_.type), got, current_.payload_bytes);
}

template <class Stream>
std::string basic_tcp_link<Stream>::io_reason(const std::error_code& ec) const {
  if (stream_traits<Stream>::closed_by_peer(ec)) return "connection closed by " + peer_;
  if (ec == asio::error::operation_aborted) return "closed locally";
  return "connection to " + peer_ + " failed: " + ec.message();
}

template <class Stream>
void basic_tcp_link<Stream>::write_failed(const std::error_code& ec) {
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
  log_.debug("write to {} failed ({}); reading what it sent before closing", peer_, ec.message());
  for (auto& done : written) done();
  for (auto& frame : dropped)
    if (frame.on_sent) frame.on_sent();
}

template <class Stream>
void basic_tcp_link<Stream>::fail(const std::string& reason) {
  long_read(false);
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
  caps_ = {};
  if (auto rx = std::move(receiver_)) rx->on_close(reason);
}

}  // namespace bps::transport

#if defined(BYTEPS_COMPILED) && !defined(BYTEPS_COMPILE_BODIES)
namespace bps::transport {
extern template class basic_tcp_link<asio::ip::tcp::socket>;  // src/bodies.cpp
}  // namespace bps::transport
#endif
