#pragma once
/// @file
/// `detail::clock_sync`: how far a node's clock is from the scheduler's, so that the timelines
/// of all nodes line up (`byteps-trace merge`). NTP's way: the node sends its time t0, the
/// scheduler answers with its own time ts, the answer arrives at t1; then
/// `offset = ts - (t0 + t1) / 2`, wrong by at most half the round trip. The estimate kept is
/// the sample with the shortest round trip among the last `window` ones, so a probe delayed by
/// a busy link does not spoil it, and a clock that drifts is followed (probes ride on the
/// heartbeats, rendezvous/client.hpp).
///
/// @par Thread Safety
/// All members may be called from any thread.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace bps::detail {

/// The clock every timeline timestamp is read from: monotonic, so no adjustment of the wall
/// clock bends a span; in nanoseconds.
inline std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// scheduler time = node time + `offset_ns`, within `rtt_ns / 2`. `samples` == 0: unmeasured.
struct clock_offset {
  std::int64_t offset_ns = 0;
  std::int64_t rtt_ns = 0;
  int samples = 0;
};

class clock_sync {
 public:
  static constexpr std::size_t window = 16;

  /// One probe: sent at `sent_ns` (our clock), read `remote_ns` on the scheduler, and its
  /// answer arrived at `back_ns` (our clock). A sample whose answer came before it left (a
  /// corrupt or foreign echo) is ignored.
  void sample(std::int64_t sent_ns, std::int64_t remote_ns, std::int64_t back_ns) {
    if (back_ns < sent_ns) return;
    const std::int64_t rtt = back_ns - sent_ns;
    std::lock_guard lock(mu_);
    recent_[next_++ % window] = {remote_ns - (sent_ns + rtt / 2), rtt, 1};
    ++total_;
  }

  /// The best estimate so far (the shortest round trip among the recent samples).
  clock_offset best() const {
    std::lock_guard lock(mu_);
    clock_offset b;
    for (std::size_t i = 0; i < std::min<std::size_t>(next_, window); ++i)
      if (b.samples == 0 || recent_[i].rtt_ns < b.rtt_ns) b = recent_[i];
    b.samples = total_;
    return b;
  }

 private:
  mutable std::mutex mu_;
  std::array<clock_offset, window> recent_{};
  std::size_t next_ = 0;
  int total_ = 0;
};

}  // namespace bps::detail
