#pragma once
/// @file
/// A thread that runs posted tasks in order, sleeping on a condition variable when idle (no
/// polling: the machines this runs on may have two cores). The server's engine threads are these.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace bps::detail {

class task_thread {
 public:
  task_thread() : thread_([this] { loop(); }) {}
  task_thread(const task_thread&) = delete;
  task_thread& operator=(const task_thread&) = delete;
  ~task_thread() { stop(); }

  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  /// Runs what was posted before, then ends the thread. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the state above exists
};

}  // namespace bps::detail
