#pragma once
/// @file
/// The connecting end of a worker's link to a server: wait for the server's `challenge`, then
/// say `peer_hello` with the proof of the job's token for its nonce (auth.hpp, gate.hpp).
/// `challenged` is a receiver decorator that takes the challenge and hands every other frame to
/// the node's receiver; `try_peer_hello` starts a link with it and blocks until the hello left,
/// at most until a deadline, and `say_peer_hello` throws when it did not.
///
/// A listener may close a connection before its challenge (its BYTEPS_MAX_PENDING_CONNECTIONS
/// were full: a flood, a port scan), so a node tries again on a fresh connection, pausing as
/// `hello_backoff` says, until BYTEPS_CONNECT_TIMEOUT_MS; `no_challenge_message` is what it says
/// when it gives up (rendezvous/client.hpp for the scheduler, worker/server_links.hpp for a
/// server).

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>

#include "byteps/core/error.hpp"
#include "byteps/rendezvous/auth.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/transport/transport.hpp"

namespace bps::rendezvous {

/// Takes a listener's `challenge` frames (the first is kept) and passes everything else on. A
/// link that closes before `hand_over` is a failed try: its close is not passed on, so the node
/// never hears of it.
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
    bool handed_over = false;
    {
      std::lock_guard lock(mu_);
      closed_ = reason;
      handed_over = handed_over_;
    }
    cv_.notify_all();
    if (handed_over) node_->on_close(reason);
  }
  // The node's cut-through, cached destinations and transport frames, straight to it: the
  // challenge carries no payload in place and needs no admission.
  transport::receiver_capabilities capabilities() override {
    auto caps = node_->capabilities();
    caps.in_place = nullptr;
    caps.admission = nullptr;
    return caps;
  }

  /// The listener's nonce, once it came; nullopt at `deadline` or when the link closed first
  /// (`why` then says which).
  std::optional<nonce> wait(std::chrono::steady_clock::time_point deadline, std::string& why) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, deadline, [&] { return nonce_.has_value() || closed_.has_value(); });
    if (nonce_ && !closed_) return nonce_;
    why = closed_ ? "it closed the connection: " + *closed_
                  : std::string("no challenge within BYTEPS_HELLO_TIMEOUT_MS");
    return std::nullopt;
  }

  /// After the hello: true once `until` passed with the link open, which is then the node's,
  /// its close included; false (`why` says so) when it closed first, a failed try.
  bool hand_over(std::chrono::steady_clock::time_point until, std::string& why) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, until, [&] { return closed_.has_value(); });
    if (closed_) {
      why = "it closed the connection right after the hello: " + *closed_;
      return false;
    }
    handed_over_ = true;
    return true;
  }

 private:
  std::shared_ptr<transport::receiver> node_;
  nonce incoming_{};  // the I/O thread's
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<nonce> nonce_;
  std::optional<std::string> closed_;
  bool handed_over_ = false;  // the try succeeded: the node hears of the close
};

/// The pauses between a node's tries at a listener that closed its connection before the
/// challenge: 50 ms doubling to 1 s, each a random part (half to all) of that step, so that
/// nodes turned away together do not come back together.
class hello_backoff {
 public:
  std::chrono::milliseconds next() {
    std::uniform_int_distribution<long long> pick(step_.count() / 2, step_.count());
    const auto pause = std::chrono::milliseconds(pick(random_));
    step_ = std::min(step_ * 2, std::chrono::milliseconds(1000));
    return pause;
  }

 private:
  std::chrono::milliseconds step_{50};
  std::minstd_rand random_{std::random_device{}()};
};

/// What a node says when `who` ("the scheduler", "server 1") at `peer` sent no challenge on
/// any of its `attempts` connections within `limit` (BYTEPS_CONNECT_TIMEOUT_MS); `last` says
/// what became of the last one.
inline std::string no_challenge_message(const std::string& who, const std::string& peer,
                                        int attempts, std::chrono::milliseconds limit,
                                        const std::string& last) {
  return fmt::format(
      "{} at {} sent no challenge on any of {} connection(s) within {} ms "
      "(BYTEPS_CONNECT_TIMEOUT_MS); the last: {}. Either it closes new connections because "
      "BYTEPS_MAX_PENDING_CONNECTIONS others wait for their hello there (a flood or a port "
      "scan: look for many connections to that port), or it is not a byteps node of this "
      "version",
      who, peer, attempts, limit.count(), last);
}

/// One try: starts `link` with `node` as its receiver (behind a `challenged`), waits until
/// `deadline` for the listener's challenge, and sends `peer_hello` for machine `machine`, local
/// rank `local_rank`, proving `token`; then watches the link for `settle`. A server answers no
/// hello, so that is how a worker tells that a listener did not close the connection with the
/// hello unread (it closes the one that waited longest of BYTEPS_MAX_PENDING_CONNECTIONS for a
/// newcomer, which a flood can make this one moments after its challenge). Nullopt once the
/// link is the node's; otherwise why not, and nothing of `link` (which the caller closes)
/// reaches `node`.
template <class Link>
std::optional<std::string> try_peer_hello(Link& link, std::shared_ptr<transport::receiver> node,
                                          int machine, int local_rank, const std::string& token,
                                          std::chrono::steady_clock::time_point deadline,
                                          std::chrono::milliseconds settle) {
  auto gate = std::make_shared<challenged>(std::move(node));
  link.start(gate);
  std::string why;
  const auto n = gate->wait(deadline, why);
  if (!n) return why;
  auto body = std::make_shared<proof>(peer_hello_proof(
      token, *n, static_cast<std::uint32_t>(machine), static_cast<std::uint32_t>(local_rank)));
  wire::header h;
  h.type = wire::msg::peer_hello;
  h.sender = static_cast<std::uint32_t>(machine);
  h.part = static_cast<std::uint32_t>(local_rank);
  link.send(h, std::as_bytes(std::span(*body)), [body] {});
  if (!gate->hand_over(std::chrono::steady_clock::now() + settle, why)) return why;
  return std::nullopt;
}

/// `try_peer_hello` with `timeout` for the challenge, once, and no watch after. Throws
/// `communicator_error` naming `server` when no challenge comes.
template <class Link>
void say_peer_hello(Link& link, std::shared_ptr<transport::receiver> node, int machine,
                    int local_rank, const std::string& token, std::chrono::milliseconds timeout,
                    const std::string& server) {
  const auto why = try_peer_hello(link, std::move(node), machine, local_rank, token,
                                  std::chrono::steady_clock::now() + timeout, {});
  if (why)
    throw communicator_error(fmt::format(
        "{} at {} sent no challenge within {} ms (BYTEPS_HELLO_TIMEOUT_MS): {}; is it a byteps "
        "server of this version?",
        server, link.peer(), timeout.count(), *why));
}

}  // namespace bps::rendezvous
