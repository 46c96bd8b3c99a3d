#pragma once
/// @file
/// The stage thread of `worker::local_stage` (worker/local_stage.hpp): its loop, one pass over
/// the operations, and how one operation moves through reduce_scatter, the network and
/// all_gather. Included at the end of worker/local_stage.hpp.

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "byteps/worker/local_stage.hpp"

namespace bps::worker {

// The stage thread: sleeps on the doorbell while nothing can move, else passes over every
// operation.
template <LocalSteps L>
void local_stage<L>::stage_loop() {
  const local::doorbell bell(bell_word_.load(std::memory_order_acquire));
  const auto poll = local::poll_window_of(local_);
  auto poll_until = clock::time_point::min();
  std::vector<operation_ptr> active;
  bool aborted = false;
  for (;;) {
    const auto seen = bell.value();
    std::string failure;
    bool stopped, closing;
    {
      std::lock_guard lock(mu_);
      for (auto& op : incoming_) active.push_back(std::move(op));
      incoming_.clear();
      stopped = stopped_;
      closing = closing_;
      if (stopped && active.empty()) return;
      failure = failure_;
    }
    if (failure.empty()) {
      try {
        if (step(active)) {
          if (poll.count() > 0) poll_until = clock::now() + poll;
          continue;
        }
      } catch (const std::exception& e) {
        // A communicator_error from a step, or anything from the machine-wide `progress`
        // (say, local ranks that disagree on a shape): the machine cannot go on.
        die_(e.what());  // calls fail() back, unless the communicator is closing already
        fail(e.what());  // so the next pass fails everything in both cases
        continue;
      }
    } else {
      // A clean shutdown with nothing in flight leaves the other local ranks alone.
      if (!aborted && !(closing && active.empty())) {
        local_.abort(failure);
        aborted = true;
      }
      fail_all(active, failure);
      if (stopped) return;
      // Dead: submit throws from now on; fail what was on its way in until shutdown.
      bell.wait(seen, std::chrono::milliseconds(100));
      continue;
    }
    // A device step finishes in microseconds; the host function that rings the bell, and the
    // wake-up, take longer. So poll a while (the policy's window) before sleeping.
    if (clock::now() < poll_until && in_local_step(active)) {
      std::this_thread::yield();
      continue;
    }
    auto next = clock::time_point::max();
    for (auto& op : active) next = std::min(next, op->w.deadline);
    auto timeout = std::chrono::nanoseconds(-1);
    if (next != clock::time_point::max())
      timeout = std::max(std::chrono::nanoseconds(0), next - clock::now()) +
                std::chrono::milliseconds(1);
    bell.wait(seen, timeout);
  }
}

// One pass over everything; true when anything moved. Throws what kills the communicator:
// a step's communicator_error, anything from `progress`, a deadline passed in a local step.
template <LocalSteps L>
bool local_stage<L>::step(std::vector<operation_ptr>& active) {
  bool progressed = false;
  for (auto it = active.begin(); it != active.end();) {
    operation& op = **it;
    bool done = false;
    try {
      progressed |= advance(op, done);
    } catch (const communicator_error&) {
      throw;
    } catch (const std::exception& e) {
      fail_one(op, std::current_exception(), e.what());
      done = true;
    }
    if (done) {
      it = active.erase(it);
      progressed = true;
    } else {
      ++it;
    }
  }
  if (local_.progress()) {
    progressed = true;
    ring();
  }
  const auto now = clock::now();
  for (auto& op : active)
    if (now > op->w.deadline && op->at != stage::network)  // the network names its servers
      throw communicator_error(
          fmt::format("{} did not finish within its deadline "
                      "(BYTEPS_OP_TIMEOUT_MS): {}",
                      op->w.what, local_.waiting_for(op->w, op->t->local, op->step)));
  return progressed;
}

// Moves `op` as far as it can go now; true if it moved. Sets `done` once it finished.
template <LocalSteps L>
bool local_stage<L>::advance(operation& op, bool& done) {
  switch (op.at) {
    case stage::reduce_scatter: {
      const auto s = local_.reduce_scatter(op.w, op.t->local, op.step);
      if (s != local::step_status::done) return s == local::step_status::moved;
      trace_.local_step(*op.w.state, "reduce_scatter", 0);
      share(op.w.owned_segment);
      start_network(op);
      op.at = stage::network;
      return true;
    }
    case stage::network: {
      for (auto& h : op.slices)
        if (!h.ready()) return false;
      for (auto& h : op.slices) {
        try {
          h.wait();
        } catch (...) {
          if (!op.w.error) op.w.error = std::current_exception();
        }
      }
      op.at = stage::all_gather;
      op.all_gather_began_ns = trace_.now();
      return true;
    }
    case stage::all_gather: {
      const auto s = local_.all_gather(op.w, op.t->local, op.step);
      if (s != local::step_status::done) return s == local::step_status::moved;
      trace_.local_step(*op.w.state, "all_gather", op.all_gather_began_ns);
      ++op.t->round;
      finish(op, op.w.error);
      done = true;
      return true;
    }
  }
  return false;
}

}  // namespace bps::worker
