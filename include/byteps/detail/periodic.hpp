#pragma once
/// @file
/// A thread that calls a function every period until stopped. It sleeps on a condition variable
/// between ticks, so an idle node wakes only once per period (heartbeats, stall checks).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace bps::detail {

class periodic_thread {
 public:
  periodic_thread() = default;
  periodic_thread(std::chrono::milliseconds period, std::function<void()> tick) {
    start(period, std::move(tick));
  }
  periodic_thread(const periodic_thread&) = delete;
  periodic_thread& operator=(const periodic_thread&) = delete;
  ~periodic_thread() { stop(); }

  void start(std::chrono::milliseconds period, std::function<void()> tick) {
    stop();
    stopping_ = false;
    thread_ = std::thread([this, period, tick = std::move(tick)] {
      std::unique_lock lock(mu_);
      while (!cv_.wait_for(lock, period, [&] { return stopping_; })) {
        lock.unlock();
        tick();
        lock.lock();
      }
    });
  }

  /// Idempotent; must not be called from `tick` itself.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace bps::detail
