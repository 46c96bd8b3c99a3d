#pragma once
/// @file
/// What `server::node` does in elastic training (see server/node.hpp and docs/reliability.md,
/// "Elastic training"): the scheduler's membership notices, each engine's restart of its rounds
/// in flight, and the wait for the scheduler's word on a lost worker. Included at the end of
/// server/node.hpp.

#include <fmt/core.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "byteps/server/node.hpp"

namespace bps::server {

/// Whether worker machine `machine` is among `members` (by machine).
inline bool takes_part(const std::vector<bool>& members, int machine) {
  return machine >= 0 && static_cast<std::size_t>(machine) < members.size() &&
         members[static_cast<std::size_t>(machine)];
}

// Each engine starts its rounds in flight over without the removed machine and asks the
// members whose pushes it discarded to push again; the removed machine's links close.
template <class T, class H>
void node<T, H>::on_membership(const rendezvous::frame& f) {
  rendezvous::membership m;
  try {
    m = rendezvous::decode_membership(f.payload);
  } catch (const wire::decode_error& e) {
    return fail(fmt::format("a malformed membership notice from the scheduler: {}", e.what()));
  }
  std::vector<bool> members(static_cast<std::size_t>(cfg_.num_workers), false);
  for (auto machine : m.members)
    if (machine < cfg_.num_workers) members[static_cast<std::size_t>(machine)] = true;
  {
    std::lock_guard lock(mu_);
    if (m.epoch <= epoch_) return;  // notices come in order; an old one changes nothing
    epoch_ = m.epoch;
    members_ = members;
  }
  const auto line = fmt::format("worker {} removed from the job ({}): {} worker machines go on "
                                "(membership epoch {}); rounds in flight start over without it",
                                m.removed, m.why, m.members.size(), m.epoch);
  if (m.lost)
    log_.warn("{}", line);
  else
    log_.info("{}", line);
  for (auto& e : engines_)
    e->post([this, ep = e.get(), members, processes = m.processes] {
      restart_rounds(*ep, members, static_cast<std::uint32_t>(processes));
    });
  for (auto& w : places_.holders())
    if (!takes_part(members, w->worker))
      w->send_removal(fmt::format("worker {} was removed from the job (membership epoch {}): {}",
                                  w->worker, m.epoch, m.why));
}

template <class T, class H>
void node<T, H>::restart_rounds(engine& e, const std::vector<bool>& members,
                              std::uint32_t processes) {
  e.contributors = processes;
  if constexpr (server::restarts_rounds<H>) {
    std::size_t asked = 0;
    const auto redo = e.handler.restart_rounds(members);
    for (const auto& r : redo) {
      auto& room = e.waiting.at(key_id{r.key, r.part});
      wire::header about;
      about.key = r.key;
      about.part = r.part;
      about.round = r.round;
      // The workers asked to push again leave the room (their re-push joins it again), and
      // so do removed ones; others may wait on (an asynchronous key's held workers).
      std::erase_if(room.workers, [&](const session_ptr& w) {
        if (!takes_part(members, w->worker)) return true;
        if (std::find(r.workers.begin(), r.workers.end(), w->worker) == r.workers.end())
          return false;
        w->send_redo(about);
        ++asked;
        return true;
      });
    }
    if (!redo.empty())
      log_.info("{} round(s) in flight started over; {} push(es) asked for again", redo.size(),
                asked);
  }
}

template <class T, class H>
void node<T, H>::fail_unless_removed(int machine, std::string why) {
  const auto by =
      detail::timer_thread::clock::now() + cfg_.heartbeat_timeout + cfg_.heartbeat_interval;
  lost_worker_.post_at(by, [this, machine, why = std::move(why)](bool cancelled) {
    if (!cancelled && is_member(machine)) fail(why);
  });
}

template <class T, class H>
bool node<T, H>::is_member(int machine) {
  std::lock_guard lock(mu_);
  return members_.empty() || takes_part(members_, machine);
}

}  // namespace bps::server
