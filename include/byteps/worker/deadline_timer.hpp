#pragma once
/// @file
/// `bps::worker::deadline_timer`: the one thread of a worker that enforces every operation's
/// deadline (BYTEPS_OP_TIMEOUT_MS after the call), whether or not anybody waits on its handle.
/// When an operation's deadline passes before it finished, the timer sets its `expired` and
/// calls its `on_deadline` (the worker names what the operation still waits for and fails; the
/// local stage wakes its thread to do so). Handles only wait, bounded; nothing else compares
/// the clock with a deadline.
///
/// Every operation of a worker has the same timeout, so deadlines come in the order operations
/// are watched: a queue in that order replaces a heap, its front is the next deadline, and
/// finished operations leave from the front as new ones are watched. Watching never wakes the
/// thread: with nothing queued it sleeps one timeout, which ends before any deadline watched
/// meanwhile (it is woken only for one that would not, a caller that took long between the
/// call and the watch).
///
/// @par Thread Safety
/// `watch` from any thread. `on_deadline` runs on the timer's thread, which holds no lock then.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "byteps/core/op_state.hpp"

namespace bps::worker {

class deadline_timer {
 public:
  using clock = std::chrono::steady_clock;

  explicit deadline_timer(clock::duration timeout)
      : timeout_(timeout), thread_([this] { loop(); }) {}
  deadline_timer(const deadline_timer&) = delete;
  deadline_timer& operator=(const deadline_timer&) = delete;
  ~deadline_timer() { stop(); }

  /// Enforces `op->deadline` from now on.
  void watch(const std::shared_ptr<detail::op_state>& op) {
    bool wake = false;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      while (!queue_.empty() && finished(queue_.front().op)) queue_.pop_front();
      // Callers' clocks are read before the lock: keep the queue in deadline order.
      auto at = queue_.end();
      while (at != queue_.begin() && std::prev(at)->due > op->deadline) --at;
      queue_.insert(at, entry{op->deadline, op});
      wake = op->deadline < wake_at_;
    }
    if (wake) cv_.notify_one();
  }

  /// Ends the thread; deadlines that did not pass are not enforced any more. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct entry {
    clock::time_point due;
    std::weak_ptr<detail::op_state> op;
  };

  static bool finished(const std::weak_ptr<detail::op_state>& weak) {
    auto op = weak.lock();
    if (!op) return true;
    std::lock_guard lock(op->mu);
    return op->done;
  }

  void loop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      const auto now = clock::now();
      if (queue_.empty()) {
        wake_at_ = now + timeout_;
        cv_.wait_until(lock, wake_at_);
        continue;
      }
      if (finished(queue_.front().op)) {
        queue_.pop_front();
        continue;
      }
      if (now < queue_.front().due) {
        wake_at_ = queue_.front().due;
        cv_.wait_until(lock, wake_at_);
        continue;
      }
      auto op = queue_.front().op.lock();
      queue_.pop_front();
      if (!op) continue;
      wake_at_ = clock::time_point::min();  // busy: a watch needs no wake-up
      lock.unlock();
      op->expired.store(true, std::memory_order_release);
      if (op->on_deadline) op->on_deadline(*op);
      op.reset();
      lock.lock();
    }
  }

  const clock::duration timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<entry> queue_;                               // by deadline
  clock::time_point wake_at_ = clock::time_point::max();  // when the thread looks next
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace bps::worker
