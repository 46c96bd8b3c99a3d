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

#include "byteps/detail/clock_sync.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::rendezvous {

struct frame {
  wire::header header;
  std::vector<std::byte> payload;
  std::string text() const { return {reinterpret_cast<const char*>(payload.data()), payload.size()}; }
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
  void on_notice(wire::msg type, std::function<void(const frame&)> f) {
    std::vector<frame> queued;
    {
      std::lock_guard lock(mu_);
      notices_.emplace_back(type, f);
      for (auto it = frames_.begin(); it != frames_.end();) {
        if (it->header.type == type) {
          queued.push_back(std::move(*it));
          it = frames_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const auto& q : queued) f(q);
  }
  /// From now on the link closing is normal (we said bye, or got shutdown).
  void expect_close() {
    std::lock_guard lock(mu_);
    close_expected_ = true;
  }

  std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
    if (h.payload_bytes > max_payload) {
      reason = "control frame too large";
      return {};
    }
    scratch_.resize(h.payload_bytes);
    return scratch_;
  }

  void on_message(const wire::header& h, std::span<std::byte> payload) override {
    std::function<void(const std::string&)> notify;
    std::string failure;
    {
      std::lock_guard lock(mu_);
      last_heard_ = clock::now();
    }
    if (h.type == wire::msg::heartbeat) {
      // The scheduler's answer to a clock probe (client::probe_clock) echoes our time in
      // `round` and carries its own in `offset`; its own heartbeats have round 0.
      if (h.round != 0) {
        clock_.sample(static_cast<std::int64_t>(h.round), static_cast<std::int64_t>(h.offset),
                      detail::steady_ns());
        { std::lock_guard lock(mu_); }  // a waiter checks under mu_: no wake-up lost
        cv_.notify_all();
      }
      return;
    }
    frame f{h, {payload.begin(), payload.end()}};
    std::function<void(const frame&)> notice;
    {
      std::lock_guard lock(mu_);
      for (const auto& [type, fn] : notices_)
        if (type == h.type) notice = fn;
    }
    if (notice) return notice(f);
    {
      std::lock_guard lock(mu_);
      // The scheduler closes the link right after these: that close is no failure.
      if (h.type == wire::msg::shutdown || h.type == wire::msg::refuse) close_expected_ = true;
      if (h.type == wire::msg::node_failed && !failed_) {
        failed_ = true;
        failure = "the scheduler reports: " + f.text();
        notify = on_failure_;
      }
      frames_.push_back(std::move(f));
    }
    cv_.notify_all();
    if (notify) notify(failure);
  }

  void on_close(const std::string& reason) override { fail_now(reason); }

  /// This node's clock against the scheduler's, from the answered clock probes.
  detail::clock_offset clock_offset() const { return clock_.best(); }

  /// Waits until `n` clock probes were answered in all, the link is gone, or `deadline`; true
  /// for the first.
  bool wait_clock_samples(int n, clock::time_point deadline) {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, deadline,
                          [&] { return closed_ || clock_.best().samples >= n; }) &&
           !closed_;
  }

  /// When the peer was last heard from (any frame).
  clock::time_point last_heard() const {
    std::lock_guard lock(mu_);
    return last_heard_;
  }

  /// The link is dead for `reason` (closed, or silent too long): waiters wake with it, and the
  /// failure callback runs unless the close was expected. Only the first reason counts.
  void fail_now(const std::string& reason) {
    std::function<void(const std::string&)> notify;
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      close_reason_ = reason;
      if (!close_expected_ && !failed_) {
        failed_ = true;
        notify = on_failure_;
      }
    }
    cv_.notify_all();
    if (notify) notify(reason);
  }

  /// The first frame of one of `types`, removed from the inbox; nullopt when the deadline passes
  /// or the link closes first (`why` then says which).
  std::optional<frame> take(std::initializer_list<wire::msg> types, clock::time_point deadline,
                            std::string& why) {
    std::unique_lock lock(mu_);
    for (;;) {
      for (auto it = frames_.begin(); it != frames_.end(); ++it) {
        for (auto t : types) {
          if (it->header.type == t) {
            frame f = std::move(*it);
            frames_.erase(it);
            return f;
          }
        }
      }
      if (closed_) {
        why = close_reason_;
        return std::nullopt;
      }
      if (deadline == clock::time_point::max()) {
        cv_.wait(lock);
      } else if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        why = "timed out";
        return std::nullopt;
      }
    }
  }

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
