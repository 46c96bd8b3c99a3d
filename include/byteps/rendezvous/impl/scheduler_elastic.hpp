#pragma once
/// @file
/// The scheduler's side of elastic training (see rendezvous/scheduler.hpp and
/// docs/reliability.md, "Elastic training"): a worker machine that is lost or leaves after the
/// cluster formed is removed from the job, and everyone still in it hears which machines go on.
/// Included at the end of rendezvous/scheduler.hpp.

#include "byteps/rendezvous/scheduler.hpp"

#include <string>
#include <vector>

#include <fmt/core.h>

namespace bps::rendezvous {

// Worker `n` is out of the job: lost (`lost`: its link closed or it fell silent) or left (a bye
// without a failure). Its machine is removed; fewer than BYTEPS_MIN_NUM_WORKER machines left
// after a loss fails the job. A machine leaves whole: its other local ranks go with it.
template <class T>
void scheduler<T>::worker_removed_locked(node& n, const std::string& what, bool lost) {
  const int machine = n.rank;
  if (machine < 0 || !removed_.insert(machine).second) return;
  cv_.notify_all();  // its other local ranks are gone too: run() may be waiting for that
  // A worker joining whose membership the servers already have is one of the members.
  rendezvous::membership m =
      members_locked(join_ && join_->epoch != 0 ? join_->machine : -1);
  m.epoch = ++epoch_;
  m.removed = machine;
  m.why = what.substr(0, 4096);  // a notice's reason has at most 4096 bytes
  m.lost = lost;
  const int remain = static_cast<int>(m.members.size());
  if (lost && remain < cfg_.fewest_workers())
    return node_failed_locked(
        n, fmt::format("{}, and {} worker machine{} remain{}, fewer than BYTEPS_MIN_NUM_WORKER={}",
                       what, remain, remain == 1 ? "" : "s", remain == 1 ? "s" : "",
                       cfg_.fewest_workers()));
  workers_ = m.processes;
  if (remain == 0) {  // the last worker said bye: the job ends as it always does
    removals_unseen_ = false;  // nobody is left to see them
    if (join_ && join_->machine < 0) join_.reset();
    if (join_ || !joins_waiting_.empty())
      abort_join_locked("every worker of the job left before this one could join");
    return;
  }
  const auto line = fmt::format("{} {}: removed from the job; {} worker machines go on "
                                "(membership epoch {})",
                                describe(n), what, remain, m.epoch);
  if (lost)
    log_.warn("{}", line);
  else
    log_.info("{}", line);
  const auto notice = rendezvous::encode(m);
  last_server_notice_ = notice;
  for (auto& x : nodes_) {
    if (!x.alive || x.left || x.standby) continue;
    if (x.r == role::server || (x.r == role::worker && !x.joining && !removed_.contains(x.rank)))
      send_locked(x.link, wire::msg::membership, notice);
  }
  // Nodes of the removed machine still connected (its other local ranks, or a worker that only
  // fell silent) get the notice too, which tells them why, and their link closes after it.
  for (auto& x : nodes_)
    if (x.alive && x.r == role::worker && x.rank == machine && !x.left) {
      x.alive = false;
      send_locked(x.link, wire::msg::membership, notice, 0, true);
    }
  for (auto& [number, entered] : barriers_)
    std::erase_if(entered, [&](int i) {
      const auto& e = nodes_[static_cast<std::size_t>(i)];
      return e.r == role::worker && removed_.contains(e.rank);
    });
  release_barriers_locked();
  if (join_) advance_join_locked();  // a pending join waits for members only
  // The workers see the removal at one step boundary they agree on, as a join.
  removals_unseen_ = true;
  next_join_locked();
}

template <class T>
rendezvous::membership scheduler<T>::members_locked(int joining) const {
  rendezvous::membership m;
  std::vector<int> local_sizes(static_cast<std::size_t>(cfg_.worker_slots()), 0);
  for (const auto& w : nodes_)
    if (w.r == role::worker && w.rank >= 0 && w.rank < cfg_.worker_slots() &&
        (!w.joining || w.rank == joining))
      local_sizes[static_cast<std::size_t>(w.rank)] = w.local_size;
  for (int k = 0; k < cfg_.worker_slots(); ++k)
    if ((k == joining || !removed_.contains(k)) && local_sizes[static_cast<std::size_t>(k)] > 0) {
      m.members.push_back(k);
      m.local_sizes.push_back(local_sizes[static_cast<std::size_t>(k)]);
      m.processes += local_sizes[static_cast<std::size_t>(k)];
    }
  return m;
}

}  // namespace bps::rendezvous
