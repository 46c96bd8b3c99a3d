#pragma once
/// @file
/// The scheduler's control plane after a node said hello (see rendezvous/scheduler.hpp): the
/// frames nodes send it (barriers, byes, heartbeats, an elastic join's reports) and the
/// heartbeat monitor that finds silent nodes, overdue failovers, joins and failures to judge.
/// Included at the end of rendezvous/scheduler.hpp.

#include "byteps/rendezvous/scheduler.hpp"

#include <chrono>
#include <mutex>
#include <span>
#include <string>

#include <fmt/core.h>

namespace bps::rendezvous {

template <class T>
void scheduler<T>::handle(session& s, const wire::header& h, std::span<std::byte> payload) {
  std::lock_guard lock(mu_);
  if (s.refused) return;  // its refusal is on its way; the link closes after it
  if (s.node_index < 0 && h.type != wire::msg::hello) {  // a stranger: never "a worker"
    gate_.refused(*s.ticket,
                  fmt::format("it sent a {} frame before its hello", wire::msg_name(h.type)));
    return s.link_->close();
  }
  if (h.type == wire::msg::hello) return hello_locked(s, payload);
  nodes_[static_cast<std::size_t>(s.node_index)].last_heard = clock::now();
  if (h.type == wire::msg::heartbeat) {  // nodes beat from their hello on
    if (h.round != 0) answer_clock_probe(s, h.round);
    return;
  }
  node& n = nodes_[static_cast<std::size_t>(s.node_index)];
  switch (h.type) {
    case wire::msg::step_report:
    case wire::msg::at_boundary:
    case wire::msg::membership_ack:
      return join_frame_locked(s.node_index, h, payload);
    case wire::msg::barrier: {
      if (n.r != role::worker)
        throw wire::decode_error("it entered a barrier, which only workers do");
      barriers_[h.round].insert(s.node_index);
      release_barriers_locked();
      return;
    }
    case wire::msg::bye:
      n.left = true;
      if (n.joining) return joiner_lost_locked(n, "said bye before it joined");
      if (!payload.empty()) {  // it leaves after a failure: the job failed
        const std::string why(reinterpret_cast<const char*>(payload.data()), payload.size());
        // Elastic training: unless its machine is removed, which may be why it failed (a
        // local rank whose sibling died can say so before the sibling's link close is seen).
        if (cfg_.elastic() && n.r == role::worker) {
          if (!removed_.contains(n.rank))
            failures_to_judge_.push_back(
                {clock::now() + cfg_.heartbeat_timeout + cfg_.heartbeat_interval, n.rank,
                 fmt::format("{} left after a failure: {}", describe(n), why)});
          return;
        }
        job_failed_locked(fmt::format("{} left after a failure: {}", describe(n), why));
        return;
      }
      log_.debug("{} said bye", describe(n));
      // Elastic training: a machine leaves once all its processes did (at the end of a job
      // its local ranks say bye one by one, and none must be removed under another).
      if (cfg_.elastic() && formed_ && !shutting_down_ && machine_left_locked(n.rank))
        worker_removed_locked(n, "left", false);
      cv_.notify_all();
      return;
    default:
      // A peer breaking the protocol: its link closes, and the job fails naming it and this.
      throw wire::decode_error(fmt::format(
          "it sent a {} frame, which the scheduler does not take", wire::msg_name(h.type)));
  }
}

template <class T>
void scheduler<T>::check_heartbeats() {
  std::lock_guard lock(mu_);
  cv_.notify_all();  // the backstop of run()'s wait (scheduler.hpp, above finish())
  const auto now = clock::now();
  for (auto& n : nodes_) {
    if (!n.alive || n.left || shutting_down_) continue;
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - n.last_heard);
    if (silent > cfg_.heartbeat_timeout) {
      n.alive = false;
      n.link->close();
      lost_locked(n, fmt::format("stopped responding: nothing heard for {} ms "
                                 "(BYTEPS_HEARTBEAT_TIMEOUT_MS={})",
                                 silent.count(), cfg_.heartbeat_timeout.count()));
      continue;
    }
    wire::header h;
    h.type = wire::msg::heartbeat;
    n.link->send(h, {}, {});
  }
  if (!shutting_down_) check_vacancies_locked(now);
  if (join_ && join_->epoch == 0 && now >= join_->deadline)
    abort_join_locked(fmt::format(
        "the workers did not all reach an agreed step boundary within {} ms "
        "(BYTEPS_OP_TIMEOUT_MS); each must call step_boundary() between its steps",
        cfg_.op_timeout.count()));
  std::erase_if(failures_to_judge_, [&](const left_after_failure& f) {
    if (removed_.contains(f.machine)) return true;
    if (now < f.deadline || shutting_down_) return false;
    job_failed_locked(f.why);
    return true;
  });
}

}  // namespace bps::rendezvous
