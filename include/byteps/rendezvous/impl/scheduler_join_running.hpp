#pragma once
/// @file
/// The scheduler's side of a worker joining a running elastic job (see rendezvous/scheduler.hpp
/// and docs/reliability.md, "Elastic training"). One join at a time:
///
/// 1. The newcomer's hello is held (a machine of several local ranks: until all its processes
///    said hello; it joins whole). Every member worker is asked how many step boundaries it
///    passed (`step_query`); each answers at once (`step_report`) and promises not to pass the
///    next one without a word. The boundary T is one past the highest answer: no member passed
///    it, since in a synchronous job none is a whole step ahead of another.
/// 2. Members are told T and which machine sends the job's state (`join_at`: the lowest member
///    of the newcomer's local size). Each stops at T with nothing in flight and says so
///    (`at_boundary`); the reports of that machine's processes carry the state, local rank l's
///    for the newcomer's local rank l (they own the same slices of every tensor).
/// 3. The servers take the newcomer as a member (`membership`) and say when every engine did
///    (`membership_ack`): no round is in flight, so none starts over.
/// 4. Members hear the new membership (it names T, where they see it), and the newcomer gets
///    its welcome and the state (`join_state`). It pushes from the step after T.
///
/// A join that does not reach step 3 within BYTEPS_OP_TIMEOUT_MS, or whose state sender is
/// lost first, is called off: the newcomer is refused naming why and the members go on.
///
/// A removal is agreed on the same way, without a newcomer (`running_join::machine` -1): step 1,
/// then `join_at` names the boundary where every member sees the membership so far
/// (`wire::boundary_only`), and nobody stops there. So every worker sees a removal at the same
/// step, and a trainer that rescales its learning rate there does it at the same step on all.
/// Included at the end of rendezvous/scheduler.hpp.

#include "byteps/rendezvous/scheduler.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>

namespace bps::rendezvous {

// Indexes (in nodes_) of the processes of machine `machine` waiting to join, by local rank.
template <class T>
std::vector<int> scheduler<T>::joining_nodes_locked(int machine) const {
  std::vector<int> out;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const node& n = nodes_[i];
    if (n.joining && n.alive && n.rank == machine) out.push_back(static_cast<int>(i));
  }
  std::sort(out.begin(), out.end(), [&](int a, int b) {
    return nodes_[static_cast<std::size_t>(a)].local_rank <
           nodes_[static_cast<std::size_t>(b)].local_rank;
  });
  return out;
}

template <class T>
bool scheduler<T>::machine_in_use_locked(int k) const {
  for (const auto& n : nodes_)
    if (n.r == role::worker && n.rank == k && (member_locked(n) || (n.joining && n.alive)))
      return true;
  return false;
}

// Why worker `theirs` cannot join the running job, if it cannot.
template <class T>
std::optional<std::string> scheduler<T>::join_refusal_locked(const rendezvous::hello& theirs) const {
  const int slots = cfg_.worker_slots();
  if (theirs.requested_rank >= slots)
    return fmt::format("DMLC_WORKER_ID={} is past the job's worker machines 0 .. {} "
                       "(BYTEPS_MAX_NUM_WORKER={})",
                       theirs.requested_rank, slots - 1, cfg_.max_workers);
  if (theirs.requested_rank < 0 && theirs.local_size > 1)
    return fmt::format("a worker with BYTEPS_LOCAL_SIZE={} must set DMLC_WORKER_ID (its "
                       "machine's index)",
                       theirs.local_size);
  bool donor = false;  // a machine in the job has this local size, to send the state
  for (const auto& n : nodes_) donor = donor || (member_locked(n) && n.local_size == theirs.local_size);
  if (!donor)
    return fmt::format("no machine in the job runs BYTEPS_LOCAL_SIZE={} worker processes, so "
                       "none can send this machine's processes the state of their slices",
                       theirs.local_size);
  int taken = 0;
  for (int k = 0; k < slots; ++k) taken += machine_in_use_locked(k) ? 1 : 0;
  if (const int k = theirs.requested_rank; k >= 0 && machine_in_use_locked(k)) {
    for (const auto& n : nodes_)
      if (member_locked(n) && n.rank == k)
        return fmt::format("DMLC_WORKER_ID={} is taken by a worker machine in the job", k);
    // Processes of the machine wait to join: this one must fit with them.
    for (const auto& n : nodes_) {
      if (!n.joining || !n.alive || n.rank != k) continue;
      if (n.local_size != theirs.local_size)
        return fmt::format("BYTEPS_LOCAL_SIZE differs on machine {} (DMLC_WORKER_ID): this "
                           "worker says {}, the worker at {} says {}",
                           k, theirs.local_size, n.peer, n.local_size);
      if (n.local_rank == theirs.local_rank)
        return fmt::format("DMLC_WORKER_ID={} BYTEPS_LOCAL_RANK={} is already taken by the "
                           "worker at {}",
                           k, theirs.local_rank, n.peer);
    }
    return std::nullopt;  // its machine is counted already
  }
  if (taken >= slots)
    return fmt::format("the job already has {} worker machines, its most "
                       "(BYTEPS_MAX_NUM_WORKER={}); a worker may join once one leaves",
                       taken, cfg_.max_workers > 0 ? cfg_.max_workers : cfg_.num_workers);
  return std::nullopt;
}

// Holds a worker's hello until its machine can join between steps; refuses it naming why it
// cannot.
template <class T>
void scheduler<T>::join_running_locked(session& s, const rendezvous::hello& theirs) {
  if (auto why = join_refusal_locked(theirs)) return refuse_locked(s, *why);
  int machine = theirs.requested_rank;
  for (int k = 0; machine < 0; ++k)  // the lowest machine no one has (join_refusal checked one)
    if (!machine_in_use_locked(k)) machine = k;
  node n = node_of(theirs, s.link_);
  n.requested = machine;
  n.rank = machine;
  n.joining = true;
  s.node_index = static_cast<int>(nodes_.size());
  nodes_.push_back(std::move(n));
  gate_.passed(*s.ticket);
  s.link_->send(wire::header{.type = wire::msg::heartbeat}, {}, {});  // its hello was read
  const auto waiting = joining_nodes_locked(machine);
  log_.info("{} asks to join the running job as machine {}{}; it joins at a step boundary the "
            "workers agree on",
            describe(nodes_.back()), machine,
            theirs.local_size > 1 ? fmt::format(" ({} of its {} processes are here)",
                                                waiting.size(), theirs.local_size)
                                  : std::string());
  if (static_cast<int>(waiting.size()) == theirs.local_size) joins_waiting_.push_back(machine);
  next_join_locked();
}

// Starts the next agreement when none is under way (a removal's first, then a join): asks
// every member how far it is.
template <class T>
void scheduler<T>::next_join_locked() {
  while (!join_ && removals_unseen_) {
    removals_unseen_ = false;
    join_.emplace();
    join_->deadline = clock::now() + cfg_.op_timeout;
    for (auto& m : nodes_)
      if (member_locked(m)) send_locked(m.link, wire::msg::step_query, {});
    advance_join_locked();
  }
  while (!join_ && !joins_waiting_.empty()) {
    const int machine = joins_waiting_.front();
    joins_waiting_.pop_front();
    auto nodes = joining_nodes_locked(machine);
    if (nodes.empty() ||
        static_cast<int>(nodes.size()) != nodes_[static_cast<std::size_t>(nodes[0])].local_size)
      continue;  // one of its processes is gone (and was refused with the others)
    join_.emplace();
    join_->machine = machine;
    join_->nodes = std::move(nodes);
    join_->deadline = clock::now() + cfg_.op_timeout;
    for (auto& m : nodes_)
      if (member_locked(m)) send_locked(m.link, wire::msg::step_query, {});
    advance_join_locked();
  }
}

template <class T>
void scheduler<T>::join_frame_locked(int from, const wire::header& h, std::span<std::byte> payload) {
  node& n = nodes_[static_cast<std::size_t>(from)];
  const bool worker = member_locked(n), server = n.r == role::server && !n.standby;
  if ((h.type == wire::msg::membership_ack && !server) ||
      (h.type != wire::msg::membership_ack && !worker))
    throw wire::decode_error(
        fmt::format("it sent a {}, which only {} send", wire::msg_name(h.type),
                    h.type == wire::msg::membership_ack ? "servers" : "workers in the job"));
  if (!join_) return;  // about a join called off meanwhile
  if (h.type == wire::msg::step_report) {
    if (join_->boundary == 0) join_->reports[from] = h.round;
  } else if (h.type == wire::msg::at_boundary) {
    if (join_->boundary == 0 || h.round != join_->boundary) return;  // of a join called off
    join_->waiting.insert(from);
    if (n.rank == join_->donor)
      join_->states[n.local_rank] = std::vector<std::byte>(payload.begin(), payload.end());
  } else if (join_->epoch != 0 && h.round >= join_->epoch) {
    join_->acked.insert(from);
  }
  advance_join_locked();
}

// Moves the join under way as far as what members and servers said allows.
template <class T>
void scheduler<T>::advance_join_locked() {
  if (!join_) return;
  auto& j = *join_;
  const int local_size =
      j.nodes.empty() ? 0 : nodes_[static_cast<std::size_t>(j.nodes[0])].local_size;
  std::vector<int> members;
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (member_locked(nodes_[i])) members.push_back(static_cast<int>(i));
  if (members.empty()) return abort_join_locked("no worker of the job is left to join");
  if (j.boundary == 0) {
    std::uint64_t furthest = 0;
    for (int m : members) {
      const auto r = j.reports.find(m);
      if (r == j.reports.end()) return;  // not everyone said yet
      furthest = std::max(furthest, r->second);
    }
    if (j.machine < 0) return removal_boundary_locked(members, furthest + 1);
    // The state comes from the lowest machine in the job with the newcomer's local size: its
    // local rank l owns the slices the newcomer's local rank l will.
    for (int m : members) {
      const node& x = nodes_[static_cast<std::size_t>(m)];
      if (x.local_size == local_size && (j.donor < 0 || x.rank < j.donor)) j.donor = x.rank;
    }
    if (j.donor < 0)
      return abort_join_locked(fmt::format("no machine in the job runs BYTEPS_LOCAL_SIZE={} "
                                           "worker processes any more, to send the state",
                                           local_size));
    j.boundary = furthest + 1;
    log_.info("worker machine {} joins at step boundary {}; worker machine {} sends it the "
              "job's state",
              j.machine, j.boundary, j.donor);
    for (int m : members)
      send_join_at_locked(nodes_[static_cast<std::size_t>(m)].link, j.boundary,
                          static_cast<std::uint32_t>(j.donor), 0);
  }
  if (j.epoch == 0) {
    if (static_cast<int>(j.states.size()) < local_size && removed_.contains(j.donor))
      return abort_join_locked(fmt::format("worker machine {}, which was to send it the job's "
                                           "state, left the job first",
                                           j.donor));
    for (int m : members)
      if (!j.waiting.contains(m)) return;
    if (static_cast<int>(j.states.size()) < local_size) return;
    // Every member waits at the boundary with nothing in flight: the servers take the newcomer.
    auto notice = members_locked(j.machine);
    notice.epoch = j.epoch = ++epoch_;
    notice.joined = j.machine;
    notice.boundary = j.boundary;
    notice.lost = false;
    notice.why = "joined";
    const auto bytes = rendezvous::encode(notice);
    last_server_notice_ = bytes;
    for (auto& x : nodes_)
      if (x.alive && x.r == role::server && !x.standby)
        send_locked(x.link, wire::msg::membership, bytes);
  }
  for (const auto& x : nodes_)
    if (x.alive && x.r == role::server && !x.standby &&
        !j.acked.contains(static_cast<int>(&x - nodes_.data())))
      return;
  finish_join_locked();
}

// Every member said how far it is, and none was asked for a join: each sees the membership
// so far (the removals that started this agreement, and any since) at `boundary`.
template <class T>
void scheduler<T>::removal_boundary_locked(const std::vector<int>& members,
                                          std::uint64_t boundary) {
  log_.info("the workers see membership epoch {} at step boundary {}", epoch_, boundary);
  for (int m : members)
    send_join_at_locked(nodes_[static_cast<std::size_t>(m)].link, boundary, wire::boundary_only,
                        epoch_);
  removals_unseen_ = false;
  join_.reset();
  next_join_locked();
}

template <class T>
void scheduler<T>::send_join_at_locked(const link_ptr& l, std::uint64_t boundary,
                                       std::uint32_t sender, std::uint64_t epoch) {
  wire::header h;
  h.type = wire::msg::join_at;
  h.round = boundary;
  h.sender = sender;
  h.key = epoch;
  ++sends_in_flight_;
  l->send(h, {}, [this, l] {
    std::lock_guard lock(mu_);
    if (--sends_in_flight_ == 0 && draining_) cv_.notify_all();
  });
}

// Every server took the newcomer: members see the new membership at the boundary, and the
// newcomer's processes get their welcome and the state.
template <class T>
void scheduler<T>::finish_join_locked() {
  auto j = std::move(*join_);
  join_.reset();
  removals_unseen_ = false;  // its notice is the newest: members see every removal with it
  for (int i : j.nodes) nodes_[static_cast<std::size_t>(i)].joining = false;
  removed_.erase(j.machine);
  // A notice newer than any a member heard (a removal may have come while the servers took the
  // newcomer): members act on the newest only.
  auto notice = members_locked(-1);
  notice.epoch = ++epoch_;
  notice.joined = j.machine;
  notice.boundary = j.boundary;
  notice.lost = false;
  notice.why = "joined";
  workers_ = notice.processes;
  const auto bytes = rendezvous::encode(notice);
  last_server_notice_ = bytes;
  for (auto& x : nodes_)
    if (member_locked(x) && x.rank != j.machine) send_locked(x.link, wire::msg::membership, bytes);
  for (auto& x : nodes_)
    if (x.alive && x.r == role::server && !x.standby)
      send_locked(x.link, wire::msg::membership, bytes);
  node& first = nodes_[static_cast<std::size_t>(j.nodes[0])];
  log_.info("worker machine {} at {} joined the job at step boundary {}: {} worker machines "
            "(membership epoch {})",
            j.machine, first.peer, j.boundary, notice.members.size(), notice.epoch);
  bool gone = !j.lost.empty();
  for (int i : j.nodes) gone = gone || !nodes_[static_cast<std::size_t>(i)].alive;
  if (gone) {  // lost after the servers took it: it joined, and leaves at once
    for (int i : j.nodes) nodes_[static_cast<std::size_t>(i)].alive = false;
    worker_removed_locked(first, j.lost.empty() ? std::string("disconnected") : j.lost, true);
  } else {
    int first_rank = 0;
    for (std::size_t i = 0; i < notice.members.size() && notice.members[i] < j.machine; ++i)
      first_rank += notice.local_sizes[i];
    for (int i : j.nodes) {
      node& n = nodes_[static_cast<std::size_t>(i)];
      rendezvous::welcome w = table_;
      w.rank = j.machine;
      w.global_rank = first_rank + n.local_rank;
      w.global_size = notice.processes;
      w.epoch = notice.epoch;
      send_locked(n.link, wire::msg::welcome, rendezvous::encode(w));
      const auto& state = j.states[n.local_rank];
      wire::byte_writer out;
      out.put(static_cast<std::uint32_t>(bytes.size()));
      out.bytes().insert(out.bytes().end(), bytes.begin(), bytes.end());
      out.bytes().insert(out.bytes().end(), state.begin(), state.end());
      send_locked(n.link, wire::msg::join_state, out.take());
    }
  }
  next_join_locked();
}

// Calls the join under way off (before the servers were told): the newcomer is refused with
// `why`, members go on. Workers still waiting to join are refused too when no member is left.
template <class T>
void scheduler<T>::abort_join_locked(const std::string& why) {
  cv_.notify_all();  // a refused joiner is one worker fewer for run() to wait for
  auto refuse = [&](node& n) {
    if (!n.alive) return;
    log_.warn("{} cannot join the running job: {}", describe(n), why);
    n.alive = false;
    n.rank = -1;
    send_locked(n.link, wire::msg::refuse, text("cannot join the running job: " + why), 0, true);
  };
  if (join_ && join_->machine < 0) {  // a removal's agreement: each sees it where it can
    log_.warn("the workers did not agree on a step boundary to see membership epoch {} at: {}; "
              "each sees it at its next step_boundary()",
              epoch_, why);
    for (auto& m : nodes_)
      if (member_locked(m)) send_join_at_locked(m.link, 0, wire::boundary_only, epoch_);
    join_.reset();
  } else if (join_) {
    if (join_->epoch != 0) return;  // the servers took it: it joins (and is removed if lost)
    for (int i : join_->nodes) refuse(nodes_[static_cast<std::size_t>(i)]);
    for (auto& m : nodes_)
      if (member_locked(m)) send_locked(m.link, wire::msg::join_at, {}, 0);  // round 0: off
    join_.reset();
  }
  bool anyone = false;
  for (const auto& m : nodes_) anyone = anyone || member_locked(m);
  if (!anyone) {
    for (auto& n : nodes_)
      if (n.joining) refuse(n);
    joins_waiting_.clear();
  }
  next_join_locked();
}

// A worker waiting to join is gone: its machine cannot join (its other processes are refused).
template <class T>
void scheduler<T>::joiner_lost_locked(node& n, const std::string& what) {
  cv_.notify_all();  // its machine's other processes are refused: run() may wait for them
  log_.warn("{}, which was joining the running job, {}", describe(n), what);
  n.alive = false;
  const int machine = n.rank;
  if (join_ && join_->machine == machine && join_->epoch != 0) {
    join_->lost = what;  // the servers took it: it joins, and is removed at once
    return;
  }
  const bool current = join_ && join_->machine == machine;
  for (int i : joining_nodes_locked(machine)) {
    node& other = nodes_[static_cast<std::size_t>(i)];
    other.alive = false;
    send_locked(other.link, wire::msg::refuse,
                text(fmt::format("cannot join the running job: {} of its machine {}",
                                 describe(n), what)),
                0, true);
  }
  n.rank = -1;
  std::erase(joins_waiting_, machine);
  if (!current) return;
  for (auto& m : nodes_)
    if (member_locked(m)) send_locked(m.link, wire::msg::join_at, {}, 0);
  join_.reset();
  next_join_locked();
}

}  // namespace bps::rendezvous
