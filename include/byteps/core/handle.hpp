#pragma once
/// @file
/// `bps::handle`: what `push_pull` and `broadcast` return at once, so the caller can go on with
/// its backward pass. Every operation has a deadline (`BYTEPS_OP_TIMEOUT_MS` after the call),
/// which the worker's deadline timer enforces whether anybody waits or not: when it passes, the
/// communicator is declared dead, every pending operation fails with a message naming what it
/// waited for, and `wait()` throws `communicator_error`. A wait is bounded by that deadline
/// (plus the time a failing operation takes to let go of its buffer) even when the caller asks
/// for none.
///
/// @par Thread Safety
/// A handle may be waited on from any thread; copies share one operation.

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "byteps/core/error.hpp"
#include "byteps/core/op_state.hpp"

namespace bps {

class handle {
 public:
  using clock = std::chrono::steady_clock;

  handle() = default;
  explicit handle(std::shared_ptr<detail::op_state> s) : s_(std::move(s)) {}

  /// Blocks until the result is in the caller's buffer. Throws `communicator_error` (peer lost,
  /// deadline passed) or `usage_error` (e.g. the tensor's shape differs on another worker).
  void wait() { wait_until(clock::time_point::max()); }

  /// True when done (and then throws like `wait()` if it failed); false if `timeout` passed
  /// first. The operation's own deadline still applies.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) {
    return wait_until(clock::now() + std::chrono::duration_cast<clock::duration>(timeout));
  }

  /// Done, successfully or not; does not throw.
  bool ready() const {
    check();
    std::lock_guard lock(s_->mu);
    return s_->done;
  }

  bool valid() const noexcept { return s_ != nullptr; }

  /// Runs `f` once the operation is done (at once if it is), on the thread that finishes it.
  /// `f` must be short and must not wait on handles or call the communicator: it suits waking
  /// a thread of one's own (a pipeline stage, an event loop).
  void when_done(std::function<void()> f) const {
    check();
    s_->when_done(std::move(f));
  }
  const std::string& what() const {
    check();
    return s_->what;
  }

  /// GPU local collectives only (`bps::local::nccl`): a `cudaEvent_t`, as `void*`, that
  /// completes when the result is in the caller's device buffer, so that the trainer's own
  /// stream can wait for it (`cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(e))`)
  /// instead of its host thread. Blocks until the event has been recorded, that is until the
  /// servers' sums came back and the copies into the buffer were queued on the device: the
  /// host waits for the network, the stream for the device. Bounded by the operation's
  /// deadline; throws as `wait()` does when the operation failed. Returns nullptr for host
  /// policies (their handles complete when the result is in host memory). The event lives as
  /// long as some handle of the operation does.
  void* device_event() const {
    check();
    if (!s_->device_event) return nullptr;
    wait_for_state(clock::time_point::max(), [&] { return s_->event_recorded || s_->done.load(); });
    return s_->device_event.get();
  }

 private:
  // Polls first, yielding, for the operation's `wait_poll`: an answer that comes within it
  // finds this thread awake instead of waking it from the condition variable.
  bool wait_until(clock::time_point until) const {
    check();
    if (s_->wait_poll.count() > 0) {
      const auto stop = std::min(until, clock::now() + s_->wait_poll);
      while (!s_->done.load(std::memory_order_acquire) && clock::now() < stop)
        std::this_thread::yield();
    }
    return wait_for_state(until, [&] { return s_->done.load(); });
  }

  // Waits (holding s_->mu in `reached`) until `reached()` or `until`, and past the deadline
  // only as long as failing the operation takes; rethrows the operation's error once it is
  // done and failed.
  template <class Pred>
  bool wait_for_state(clock::time_point until, Pred reached) const {
    check();
    std::unique_lock lock(s_->mu);
    // The deadline timer fails the operation at its deadline; failing it waits for the
    // transport to let go of its buffer, and links close fast.
    constexpr auto grace = std::chrono::seconds(10);
    const auto bound = s_->deadline < clock::time_point::max() - grace ? s_->deadline + grace
                                                                       : clock::time_point::max();
    if (!s_->cv.wait_until(lock, std::min(until, bound), reached)) {
      if (until < bound) return false;
      throw communicator_error(s_->what + " passed its deadline and could not be cancelled");
    }
    if (s_->done && s_->error) std::rethrow_exception(s_->error);
    return true;
  }
  void check() const {
    if (!s_) throw usage_error("bps::handle: waiting on an empty handle (default-constructed)");
  }

  std::shared_ptr<detail::op_state> s_;
};

}  // namespace bps
