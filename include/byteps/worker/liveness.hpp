#pragma once
/// @file
/// `bps::worker::liveness`: the one failure flag of a worker. It lives until it fails (a lost
/// server, a deadline, a local rank that died: the first reason is kept) or closes (shutdown);
/// either is for good. The worker's network side (`shared_state`) and its local stage both read
/// this one flag, so they never disagree on whether the worker is dead, closing, or why.
///
/// @par Thread Safety
/// Every member may be called from any thread. Its mutex is a leaf: it is taken under the
/// worker's and the local stage's mutexes, and nothing is locked under it. The yes-or-no
/// questions, asked on every operation, read an atomic copy of the state and take no lock.

#include <atomic>
#include <mutex>
#include <string>

#include "byteps/core/error.hpp"

namespace bps::worker {

class liveness {
 public:
  /// Records `why` as the worker's failure. False, changing nothing, when it was dead or
  /// closing already.
  bool fail(const std::string& why) {
    std::lock_guard lock(mu_);
    if (closing_ || !dead_.empty()) return false;
    dead_ = why;
    state_.fetch_or(dead_bit, std::memory_order_release);
    return true;
  }

  /// The worker leaves the job. False when it was closing already.
  bool close() {
    std::lock_guard lock(mu_);
    if (closing_) return false;
    closing_ = true;
    state_.fetch_or(closing_bit, std::memory_order_release);
    return true;
  }

  bool closing() const { return (state_.load(std::memory_order_acquire) & closing_bit) != 0; }
  bool dead() const { return (state_.load(std::memory_order_acquire) & dead_bit) != 0; }
  /// Dead or closing: nothing more goes out or is waited for.
  bool gone() const { return state_.load(std::memory_order_acquire) != 0; }
  /// Why the worker failed; empty while it did not.
  std::string failure() const {
    if (!dead()) return {};
    std::lock_guard lock(mu_);
    return dead_;
  }

  /// Why what is still in flight fails now: the failure, or the shutdown; empty while the
  /// worker lives.
  std::string ending() const {
    if (!gone()) return {};
    std::lock_guard lock(mu_);
    if (!dead_.empty()) return dead_;
    return closing_ ? "the communicator was shut down before it finished" : std::string();
  }

  /// For a new call named `what`: `usage_error` once closing, `communicator_error` once dead.
  void throw_if_gone(const std::string& what) const {
    if (!gone()) return;
    std::lock_guard lock(mu_);
    if (closing_)
      throw usage_error((what.empty() ? std::string() : what + ": ") +
                        "this communicator was shut down; create a new one");
    if (!dead_.empty()) throw communicator_error("this communicator is dead: " + dead_);
  }

 private:
  static constexpr unsigned dead_bit = 1, closing_bit = 2;

  mutable std::mutex mu_;
  std::string dead_;
  bool closing_ = false;
  std::atomic<unsigned> state_{0};  // dead_bit, closing_bit: what the two above say
};

}  // namespace bps::worker
