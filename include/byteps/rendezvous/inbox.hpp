#pragma once
/// @file
/// `bps::rendezvous::inbox`: a link receiver for control traffic. It keeps whole frames (with
/// bounded payloads) until a thread takes them with a deadline, and reports the link's failure
/// or a `node_failed` notice to a callback at once, so a node learns of a dead cluster even
/// while nobody waits on the inbox.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/linkage.hpp"
#include "byteps/detail/clock_sync.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::rendezvous {

struct frame {
  wire::header header;
  std::vector<std::byte> payload;
  std::string text() const {
    return {reinterpret_cast<const char*>(payload.data()), payload.size()};
  }
};

class inbox final : public transport::receiver {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::size_t max_payload = 1u << 20;

  /// Called once, with a reason, when the link fails unexpectedly or a `node_failed` arrives.
  void on_failure(std::function<void(const std::string&)> f) {
    std::lock_guard lock(mu_);
    on_failure_ = std::move(f);
  }
  /// Frames of `type` go to `f` (on the I/O thread, in order) instead of the queue; frames of
  /// that type already queued go to it now. `f` must be short and must not block.
  BYTEPS_DECL void on_notice(wire::msg type, std::function<void(const frame&)> f);
  /// From now on the link closing is normal (we said bye, or got shutdown).
  void expect_close() {
    std::lock_guard lock(mu_);
    close_expected_ = true;
  }

  BYTEPS_DECL std::span<std::byte> payload_destination(const wire::header& h,
                                                       std::string& reason) override;

  BYTEPS_DECL void on_message(const wire::header& h, std::span<std::byte> payload) override;

  void on_close(const std::string& reason) override { fail_now(reason); }

  /// This node's clock against the scheduler's, from the answered clock probes.
  detail::clock_offset clock_offset() const { return clock_.best(); }

  /// Waits until `n` clock probes were answered in all, the link is gone, or `deadline`; true
  /// for the first.
  bool wait_clock_samples(int n, clock::time_point deadline) {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return closed_ || clock_.best().samples >= n; }) &&
           !closed_;
  }

  /// Waits until a frame came in after `t`, the link is gone, or `deadline`; true for the
  /// first.
  bool wait_heard_after(clock::time_point t, clock::time_point deadline) {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return closed_ || last_heard_ > t; }) &&
           !closed_;
  }

  /// When the peer was last heard from (any frame).
  clock::time_point last_heard() const {
    std::lock_guard lock(mu_);
    return last_heard_;
  }

  /// The link is dead for `reason` (closed, or silent too long): waiters wake with it, and the
  /// failure callback runs unless the close was expected. Only the first reason counts.
  BYTEPS_DECL void fail_now(const std::string& reason);

  /// The first frame of one of `types`, removed from the inbox; nullopt when the deadline passes
  /// or the link closes first (`why` then says which).
  BYTEPS_DECL std::optional<frame> take(std::initializer_list<wire::msg> types,
                                        clock::time_point deadline, std::string& why);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<frame> frames_;
  clock::time_point last_heard_ = clock::now();
  std::vector<std::byte> scratch_;  // I/O thread only
  bool closed_ = false;
  bool close_expected_ = false;
  bool failed_ = false;
  std::string close_reason_;
  std::function<void(const std::string&)> on_failure_;
  std::vector<std::pair<wire::msg, std::function<void(const frame&)>>> notices_;
  detail::clock_sync clock_;
};

}  // namespace bps::rendezvous

#if BYTEPS_INCLUDE_BODIES
#include "byteps/rendezvous/impl/inbox.hpp"
#endif
