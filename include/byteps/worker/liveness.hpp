#pragma once
/// @file
/// `bps::worker::liveness`: the one failure flag of a worker. It lives until it fails (a lost
/// server, a deadline, a local rank that died: the first reason is kept) or closes (shutdown);
/// either is for good. The worker's network side (`shared_state`) and its local stage both read
/// this one flag, so they never disagree on whether the worker is dead, closing, or why.
///
/// @par Thread Safety
/// Every member may be called from any thread. Its mutex is a leaf: it is taken under the
/// worker's and the local stage's mutexes, and nothing is locked under it.

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
    return true;
  }

  /// The worker leaves the job. False when it was closing already.
  bool close() {
    std::lock_guard lock(mu_);
    if (closing_) return false;
    closing_ = true;
    return true;
  }

  bool closing() const {
    std::lock_guard lock(mu_);
    return closing_;
  }
  bool dead() const {
    std::lock_guard lock(mu_);
    return !dead_.empty();
  }
  /// Dead or closing: nothing more goes out or is waited for.
  bool gone() const {
    std::lock_guard lock(mu_);
    return closing_ || !dead_.empty();
  }
  /// Why the worker failed; empty while it did not.
  std::string failure() const {
    std::lock_guard lock(mu_);
    return dead_;
  }

  /// Why what is still in flight fails now: the failure, or the shutdown; empty while the
  /// worker lives.
  std::string ending() const {
    std::lock_guard lock(mu_);
    if (!dead_.empty()) return dead_;
    return closing_ ? "the communicator was shut down before it finished" : std::string();
  }

  /// For a new call named `what`: `usage_error` once closing, `communicator_error` once dead.
  void throw_if_gone(const std::string& what) const {
    std::lock_guard lock(mu_);
    if (closing_)
      throw usage_error((what.empty() ? std::string() : what + ": ") +
                        "this communicator was shut down; create a new one");
    if (!dead_.empty()) throw communicator_error("this communicator is dead: " + dead_);
  }

 private:
  mutable std::mutex mu_;
  std::string dead_;
  bool closing_ = false;
};

}  // namespace bps::worker
