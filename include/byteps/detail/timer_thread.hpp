#pragma once
/// @file
/// A thread that runs tasks at a time of the caller's choosing, so that nobody blocks or polls
/// to wait for it: `transport::faulty` sends its delayed frames from one, and the worker's
/// failover its deadlines and reconnections.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace bps::detail {

/// One thread that runs tasks at their due time, in (due, posting) order. `stop()` runs every
/// task still queued at once with `cancelled = true`, then joins.
class timer_thread {
 public:
  using clock = std::chrono::steady_clock;
  using task = std::function<void(bool cancelled)>;

  timer_thread() : thread_([this] { loop(); }) {}
  timer_thread(const timer_thread&) = delete;
  timer_thread& operator=(const timer_thread&) = delete;
  ~timer_thread() { stop(); }

  /// False (and `t` is not kept) once stopping.
  bool post_at(clock::time_point due, task t) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return false;
      tasks_.emplace(std::pair{due, next_++}, std::move(t));
    }
    cv_.notify_one();
    return true;
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (!thread_.joinable()) return;
    if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();  // from one of its tasks
    else thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (tasks_.empty()) {
        if (stopping_) return;
        cv_.wait(lock);
        continue;
      }
      auto first = tasks_.begin();
      if (!stopping_ && clock::now() < first->first.first) {
        cv_.wait_until(lock, first->first.first);
        continue;
      }
      task t = std::move(first->second);
      tasks_.erase(first);
      const bool cancelled = stopping_;
      lock.unlock();
      t(cancelled);
      t = nullptr;
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<clock::time_point, std::uint64_t>, task> tasks_;
  std::uint64_t next_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the state above exists
};

}  // namespace bps::detail
