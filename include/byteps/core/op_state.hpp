#pragma once
/// @file
/// `bps::detail::op_state`: the one record of one push_pull or broadcast, from the call to the
/// result. The worker makes it: its local stage (`worker::local_stage`, worker/local_stage.hpp)
/// when the local collective has steps, else its node (`worker::node`, worker/node.hpp). The
/// node's network stage awaits its partitions in it, under the node's mutex, and every
/// `bps::handle` of the operation waits on it. In core/ because the local collectives see it
/// too (`local::work::state`: a GPU policy records its device event in it).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "byteps/core/dtype.hpp"

namespace bps::detail {

struct op_state;

/// What the timeline (detail/trace.hpp) keeps of one traced operation: when it began and, by
/// partition, when it was handed to the transport and when the transport was done with it (ns
/// of `steady_clock`). Atomics, because the I/O threads read what the caller's thread wrote.
struct op_trace {
  std::int64_t begun_ns = 0;
  std::uint64_t round = 0;  ///< the tensor's round: the flow ids that join worker and server
  std::uint32_t lane = 0;   ///< the tensor's lane, where the local stage's steps go too
  std::vector<std::atomic<std::int64_t>> dispatched_ns, sent_ns;
  /// By partition, when a local stage released it to the scheduler (0: with the operation).
  std::vector<std::atomic<std::int64_t>> queued_ns;
  std::function<void(const op_state&)> on_finish;  ///< records the tensor's span
};

/// One push_pull or broadcast; its handles wait on it.
struct op_state {
  using clock = std::chrono::steady_clock;

  // Set at creation, then read-only.
  std::string what;  ///< "push_pull of 'name'", for messages
  /// How long `handle::wait` polls before it sleeps (`Config::wait_poll`).
  std::chrono::microseconds wait_poll{0};
  /// What the network stage pushes from and pulls into: the caller's buffer, or with a local
  /// stage the host memory of this rank's owned partitions (set before the first is queued).
  std::span<std::byte> data;
  dtype type = dtype::float32;
  bool average = false;
  bool compressed = false;  ///< its partitions pass through its tensor's compressors
  /// A broadcast on a machine without its root: the pushes hold only zeros, and say so
  /// (`wire::flag_no_data`), so that a round whose root's data never came fails by name.
  bool holds_no_data = false;
  std::uint64_t key = 0;
  clock::time_point deadline;
  /// Called by the worker's deadline timer (worker/deadline_timer.hpp) once `deadline` passed
  /// before the operation finished, after it set `expired`: the worker names what the
  /// operation waits for and dies.
  std::function<void(op_state&)> on_deadline;
  std::atomic<bool> expired{false};  ///< the deadline passed first (set once, by the timer)
  /// GPU local collectives only: owns the `cudaEvent_t` that completes when the result is in
  /// the caller's device buffer (the deleter destroys it); null for host policies.
  std::shared_ptr<void> device_event;
  /// Set when the timeline records this operation; null otherwise (always with tracing off).
  std::shared_ptr<op_trace> trace;

  /// With a local stage (worker/local_stage.hpp), what follows the network stage: called under
  /// the node's mutex (worker/node.hpp), so each only flags and wakes the stage thread.
  /// `part_answered(i)`: the sum of partition i of the local stage's plan (`local::work::parts`)
  /// is in `data`;
  /// `network_done(error)`: the network will not touch `data` again (in place of `finish`).
  /// Empty without a local stage.
  struct next_stage {
    std::function<void(std::size_t)> part_answered;
    std::function<void(std::exception_ptr)> network_done;
  };
  next_stage next;

  // Guarded by the worker node's mutex (worker/node.hpp), not by `mu` below.
  std::size_t unanswered = 0;    ///< partitions whose sum has not arrived
  std::size_t in_transport = 0;  ///< sends whose payload the transport may still read
  std::size_t receiving = 0;     ///< answers being written into `data` right now
  std::exception_ptr failure;
  bool released = false;

  /// Called by a GPU local collective once `device_event` has been recorded after the last
  /// copy into the caller's buffer: a stream may wait on it from now on.
  void device_event_recorded() {
    {
      std::lock_guard lock(mu);
      event_recorded = true;
    }
    cv.notify_all();
  }

  /// Called once, when nothing will touch `data` any more: by the node when there is no local
  /// stage; with one, the node calls `next.network_done` instead, and the local stage calls
  /// this once its steps are done.
  void finish(std::exception_ptr e) {
    if (trace && trace->on_finish) trace->on_finish(*this);  // before any waiter wakes
    std::function<void()> then;
    {
      std::lock_guard lock(mu);
      error = std::move(e);
      then = std::move(on_done);
      done.store(true, std::memory_order_release);
    }
    cv.notify_all();
    if (then) then();
  }

  /// Runs `f` once the operation is done: now if it is, else on the thread that finishes it
  /// (which may hold the node's mutex: `f` must be short and must not call back).
  void when_done(std::function<void()> f) {
    {
      std::lock_guard lock(mu);
      if (!done) {
        on_done = std::move(f);
        return;
      }
    }
    f();
  }

  mutable std::mutex mu;
  std::condition_variable cv;
  /// Set under `mu`; atomic so that a waiter may poll it without `mu` (`handle::wait`).
  std::atomic<bool> done{false};
  bool event_recorded = false;  ///< `device_event` is recorded (guarded by `mu`)
  std::exception_ptr error;
  std::function<void()> on_done;
};

}  // namespace bps::detail
