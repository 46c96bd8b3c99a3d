#pragma once
/// @file
/// The bodies of rendezvous/inbox.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::rendezvous {

void inbox::on_notice(wire::msg type, std::function<void(const frame&)> f) {
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

std::span<std::byte> inbox::payload_destination(const wire::header& h, std::string& reason) {
  // A joining worker's state is the one large frame (rendezvous/messages.hpp).
  const std::uint64_t limit =
      h.type == wire::msg::join_state ? wire::max_state_payload : max_payload;
  if (h.payload_bytes > limit) {
    reason = "a " + std::string(wire::msg_name(h.type)) + " frame of " +
             std::to_string(h.payload_bytes) + " bytes is too large (at most " +
             std::to_string(limit) + ")";
    return {};
  }
  scratch_.resize(h.payload_bytes);
  return scratch_;
}

void inbox::on_message(const wire::header& h, std::span<std::byte> payload) {
  std::function<void(const std::string&)> notify;
  std::string failure;
  {
    std::lock_guard lock(mu_);
    last_heard_ = clock::now();
  }
  cv_.notify_all();  // wait_heard_after
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

void inbox::fail_now(const std::string& reason) {
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

std::optional<frame> inbox::take(std::initializer_list<wire::msg> types, clock::time_point deadline,
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

}  // namespace bps::rendezvous
