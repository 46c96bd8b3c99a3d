#pragma once
/// @file
/// The connecting end of a worker's link to a server: wait for the server's `challenge`, then
/// say `peer_hello` with the proof of the job's token for its nonce (auth.hpp, gate.hpp).
/// `challenged` is a receiver decorator that takes the challenge and hands every other frame to
/// the node's receiver; `say_peer_hello` starts a link with it and blocks until the hello left,
/// at most until a deadline.

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "byteps/core/error.hpp"
#include "byteps/rendezvous/auth.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/transport/transport.hpp"

namespace bps::rendezvous {

/// Takes a listener's `challenge` frames (the first is kept) and passes everything else on.
class challenged final : public transport::receiver {
 public:
  explicit challenged(std::shared_ptr<transport::receiver> node) : node_(std::move(node)) {}

  std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
    if (h.type != wire::msg::challenge) return node_->payload_destination(h, reason);
    if (h.payload_bytes != nonce_bytes) {
      reason = fmt::format("a challenge of {} bytes (a nonce is {})", h.payload_bytes, nonce_bytes);
      return {};
    }
    return std::as_writable_bytes(std::span(incoming_));
  }
  void on_message(const wire::header& h, std::span<std::byte> payload) override {
    if (h.type != wire::msg::challenge) return node_->on_message(h, payload);
    {
      std::lock_guard lock(mu_);
      if (!nonce_) nonce_ = incoming_;
    }
    cv_.notify_all();
  }
  void on_close(const std::string& reason) override {
    {
      std::lock_guard lock(mu_);
      closed_ = reason;
    }
    cv_.notify_all();
    node_->on_close(reason);
  }
  std::size_t progress_step(const wire::header& h) override { return node_->progress_step(h); }
  void on_progress(const wire::header& h, std::size_t n) override { node_->on_progress(h, n); }
  bool wants_transport_frames() const override { return node_->wants_transport_frames(); }
  bool destination_stays(const wire::header& h, std::span<const std::byte> dest) override {
    return node_->destination_stays(h, dest);
  }

  /// The listener's nonce, once it came; nullopt at `deadline` or when the link closed first
  /// (`why` then says which).
  std::optional<nonce> wait(std::chrono::steady_clock::time_point deadline, std::string& why) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, deadline, [&] { return nonce_.has_value() || closed_.has_value(); });
    if (nonce_) return nonce_;
    why = closed_ ? "the link closed: " + *closed_ : std::string("no challenge came in time");
    return std::nullopt;
  }

 private:
  std::shared_ptr<transport::receiver> node_;
  nonce incoming_{};  // the I/O thread's
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<nonce> nonce_;
  std::optional<std::string> closed_;
};

/// Starts `link` with `node` as its receiver, waits (until `timeout`) for the server's
/// challenge, and sends `peer_hello` for machine `machine`, local rank `local_rank`, proving
/// `token`. Throws `communicator_error` naming `server` when no challenge comes.
template <class Link>
void say_peer_hello(Link& link, std::shared_ptr<transport::receiver> node, int machine,
                    int local_rank, const std::string& token, std::chrono::milliseconds timeout,
                    const std::string& server) {
  auto gate = std::make_shared<challenged>(std::move(node));
  link.start(gate);
  std::string why;
  const auto n = gate->wait(std::chrono::steady_clock::now() + timeout, why);
  if (!n)
    throw communicator_error(fmt::format(
        "{} at {} sent no challenge within {} ms (BYTEPS_HELLO_TIMEOUT_MS): {}; is it a byteps "
        "server of this version?",
        server, link.peer(), timeout.count(), why));
  auto body = std::make_shared<proof>(peer_hello_proof(
      token, *n, static_cast<std::uint32_t>(machine), static_cast<std::uint32_t>(local_rank)));
  wire::header h;
  h.type = wire::msg::peer_hello;
  h.sender = static_cast<std::uint32_t>(machine);
  h.part = static_cast<std::uint32_t>(local_rank);
  link.send(h, std::as_bytes(std::span(*body)), [body] {});
}

}  // namespace bps::rendezvous
