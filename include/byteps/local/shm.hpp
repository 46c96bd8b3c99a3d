#pragma once
/// @file
/// What the local ranks of one machine share besides their segments
/// (`detail::shm_segment`): a futex `doorbell` that wakes every local rank's stage thread when
/// any of them changes shared state, and the names of the machine's segments.
///
/// Linux only (futex). Names are `/bps-<job id>-m<machine>-<what>`: the job id is random per job
/// (from the scheduler), so two jobs on one machine never meet.

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include <fmt/core.h>

namespace bps::local {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "the futex word must be a plain 32-bit atomic");

/// A 32-bit word in shared memory that threads of several processes sleep on. Whoever changes
/// shared state rings it afterwards; a sleeper reads `value()` before looking at the state and
/// sleeps only while the value is unchanged, so no ring is lost.
class doorbell {
 public:
  explicit doorbell(std::atomic<std::uint32_t>* word) : word_(word) {}

  std::uint32_t value() const noexcept { return word_->load(std::memory_order_acquire); }

  void ring() noexcept {
    word_->fetch_add(1, std::memory_order_acq_rel);
    // Not FUTEX_PRIVATE_FLAG: the sleepers are in other processes.
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word_), FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
  }

  /// Sleeps while the word still holds `seen`, at most `timeout` (negative: no limit).
  void wait(std::uint32_t seen, std::chrono::nanoseconds timeout) const noexcept {
    timespec ts{};
    timespec* limit = nullptr;
    if (timeout.count() >= 0) {
      ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
      ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
      limit = &ts;
    }
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word_), FUTEX_WAIT, seen, limit, nullptr,
              0);
  }

 private:
  std::atomic<std::uint32_t>* word_;
};

/// The name of segment `what` of machine `machine` in job `job_id`.
inline std::string segment_name(std::uint64_t job_id, int machine, std::string_view what) {
  return fmt::format("/bps-{:016x}-m{}-{}", job_id, machine, what);
}

}  // namespace bps::local
