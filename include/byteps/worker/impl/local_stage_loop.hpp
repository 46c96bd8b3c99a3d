#pragma once
/// @file
/// The stage thread of `worker::local_stage` (worker/local_stage.hpp): its loop, one pass over
/// the operations, and how one operation moves through reduce_scatter, its partitions' flow
/// (local_reduce, the network, local_gather) and all_gather. Included at the end of
/// worker/local_stage.hpp.

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
    bool stopped;
    {
      std::lock_guard lock(mu_);
      for (auto& op : incoming_) active.push_back(std::move(op));
      incoming_.clear();
      stopped = stopped_;
      if (stopped && active.empty()) return;
    }
    const bool closing = life_.closing();
    const std::string failure = life_.ending();
    if (failure.empty()) {
      try {
        if (step(active)) {
          if (poll.count() > 0) poll_until = clock::now() + poll;
          continue;
        }
      } catch (const std::exception& e) {
        // A communicator_error from a step, or anything from the machine-wide `progress`
        // (say, local ranks that disagree on a shape): the machine cannot go on.
        die_(e.what());  // the worker's flag is dead or closing from now on either way
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
    if (clock::now() < poll_until && (in_local_step(active) || awaits_copy_in(active))) {
      std::this_thread::yield();
      continue;
    }
    // Nothing rings for a device's copy in (it may wait behind the caller's stream): look
    // again every copy_in_poll while one is pending. A deadline rings (the worker's timer).
    bell.wait(seen, awaits_copy_in(active)
                        ? std::chrono::duration_cast<std::chrono::nanoseconds>(copy_in_poll)
                        : std::chrono::nanoseconds(-1));
  }
}

// One pass over everything; true when anything moved. Throws what kills the communicator:
// a step's communicator_error, anything from `progress`, a deadline passed in a local step
// (the worker's deadline timer marks the operation expired and rings).
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
  for (auto& op : active) {
    if (!op->w.state->expired.load(std::memory_order_acquire)) continue;
    // The network names the servers it waits for, once every owned partition was released to it.
    if (op->net && !op->net->done.load(std::memory_order_acquire) &&
        op->next_reduce == op->t->owned_last) {
      network_.expire(*op->w.state);
      continue;
    }
    throw communicator_error(
        fmt::format("{} did not finish within its deadline "
                    "(BYTEPS_OP_TIMEOUT_MS): {}",
                    op->w.what, local_.waiting_for(op->w, op->t->local, op->step)));
  }
  return progressed;
}

// Moves `op` as far as it can go now; true if it moved. Sets `done` once it finished.
template <LocalSteps L>
bool local_stage<L>::advance(operation& op, bool& done) {
  switch (op.at) {
    case local_phase::local_reduce: {
      if (op.step_began_ns == 0) op.step_began_ns = detail::steady_ns();
      const auto s = local_.reduce_scatter(op.w, op.t->local, op.step);
      if (s != local::step_status::done) return s == local::step_status::moved;
      share(op.w.owned_segment);
      if (whole_steps) timed_step(op, stage::local_reduce, op.step_began_ns);
      op.at = local_phase::per_partition;
      op.step_began_ns = detail::steady_ns();
      open_network(op);
      if constexpr (!PartitionedSteps<L>) {
        for (std::size_t i = op.t->owned_first; i < op.t->owned_last; ++i)
          network_.release(op.w, i);
        op.next_reduce = op.t->owned_last;
      }
      return true;
    }
    case local_phase::per_partition:
      return flow(op);
    case local_phase::local_gather: {
      const auto s = local_.all_gather(op.w, op.t->local, op.step);
      if (s != local::step_status::done) return s == local::step_status::moved;
      if (whole_steps) timed_step(op, stage::local_gather, op.step_began_ns);
      ++op.t->round;
      finish(op, op.w.error);
      done = true;
      return true;
    }
  }
  return false;
}

// The partitions of `op` between its reduce_scatter and its all_gather. With
// `PartitionedSteps`: the next owned partition is reduced and released as soon as it is ready,
// every owned sum that came back is handed back (`part_back`), and every partition the policy
// gathers one by one is gathered once its sum is in this rank's reach. Otherwise it waits for
// the network as a whole. True if anything moved; once the network is done (and every
// partition gathered, or the network failed), the operation goes on to `all_gather`.
template <LocalSteps L>
bool local_stage<L>::flow(operation& op) {
  network_progress& net = *op.net;
  const bool network_done = net.done.load(std::memory_order_acquire);
  const bool failed = network_done && net.error;
  bool moved = false;
  if constexpr (PartitionedSteps<L>) {
    constexpr local::partition_steps steps = L::partitioned;
    auto bytes_of = [&](std::size_t i) {
      return (op.w.parts[i].last - op.w.parts[i].first) * dtype_size(op.w.type);
    };
    while (!failed && op.next_reduce < op.t->owned_last) {
      const std::size_t i = op.next_reduce;
      // A sum on the host takes the call; a device's copy ran since the previous one was seen.
      const auto began = steps.in == stage::local_reduce ? detail::steady_ns() : op.step_began_ns;
      if (!local_.reduce_part(op.w, op.t->local, i)) break;
      timed_part(op, steps.in, i, began, bytes_of(i));
      network_.release(op.w, i);
      ++op.next_reduce;
      op.step_began_ns = detail::steady_ns();
      moved = true;
      if constexpr (steps.in == stage::local_reduce) break;  // one sum a pass: gathers go on
    }
    for (std::size_t i = op.t->owned_first; i < op.t->owned_last; ++i) {
      if (op.back[i] || !net.answered[i].load(std::memory_order_acquire)) continue;
      local_.part_back(op.w, op.t->local, i);
      op.back[i] = detail::steady_ns() | 1;  // when, for the gather's span (odd: never 0)
      ++op.backs;
      moved = true;
    }
    const std::size_t first = steps.every_partition ? 0 : op.t->owned_first;
    const std::size_t last = steps.every_partition ? op.w.parts.size() : op.t->owned_last;
    // A gather that fails (another local rank failed on the tensor) ends the gathering, not the
    // network: every owned partition is still reduced and pushed, so that the other machines'
    // rounds complete, and the operation fails once the network is done with it.
    for (std::size_t i = first; !failed && !op.gather_error && i < last; ++i) {
      if (op.gathered[i] || (!steps.every_partition && !op.back[i])) continue;
      const auto began = steps.every_partition ? detail::steady_ns() : op.back[i];
      bool gathered = false;
      try {
        gathered = local_.gather_part(op.w, op.t->local, i);
      } catch (const communicator_error&) {
        throw;
      } catch (...) {
        op.gather_error = std::current_exception();
        moved = true;
        break;
      }
      if (!gathered) continue;
      timed_part(op, steps.out, i, began, bytes_of(i));
      op.gathered[i] = 1;
      ++op.gathered_count;
      moved = true;
    }
    if (!network_done || (!failed && !op.gather_error && op.gathered_count < last - first))
      return moved;
  } else {
    if (!network_done) return false;
  }
  if (net.error && !op.w.error) op.w.error = net.error;
  if (op.gather_error && !op.w.error) op.w.error = op.gather_error;
  op.at = local_phase::local_gather;
  op.step_began_ns = detail::steady_ns();
  return true;
}

}  // namespace bps::worker
