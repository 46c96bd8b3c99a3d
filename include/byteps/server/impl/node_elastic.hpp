#pragma once
/// @file
/// What `server::node` does in elastic training (see server/node.hpp and docs/reliability.md,
/// "Elastic training"): the scheduler's membership notices, each engine's restart of its rounds
/// in flight, and the wait for the scheduler's word on a lost worker. Included at the end of
/// server/node.hpp.

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <memory>
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

template <class T, class H>
void node<T, H>::start_members() {
  std::vector<bool> members(static_cast<std::size_t>(cfg_.worker_slots()), false);
  std::fill_n(members.begin(), cfg_.num_workers, true);
  {
    std::lock_guard lock(mu_);
    members_ = members;
  }
  if constexpr (server::restarts_rounds<H>)
    for (auto& e : engines_)
      e->post([ep = e.get(), members] { (void)ep->handler.restart_rounds(members); });
}

// Each engine starts its rounds in flight over without a removed machine and asks the members
// whose pushes it discarded to push again; the removed machine's links close. A machine that
// joins comes between steps, with no round in flight: the engines take it as a member, and the
// scheduler hears when all did (it lets the workers go on only then).
template <class T, class H>
void node<T, H>::on_membership(const rendezvous::frame& f) {
  rendezvous::membership m;
  try {
    m = rendezvous::decode_membership(f.payload);
  } catch (const wire::decode_error& e) {
    return fail(fmt::format("a malformed membership notice from the scheduler: {}", e.what()));
  }
  std::vector<bool> members(static_cast<std::size_t>(cfg_.worker_slots()), false);
  for (auto machine : m.members)
    if (machine < cfg_.worker_slots()) members[static_cast<std::size_t>(machine)] = true;
  {
    std::lock_guard lock(mu_);
    if (m.epoch <= epoch_) return;  // notices come in order; an old one changes nothing
    epoch_ = m.epoch;
    members_ = members;
    // Queued before the new epoch can be read: whoever reads it and then posts to an engine
    // runs after that engine's restart. The last engine to apply it tells the scheduler (which
    // waits for that in a join; a replacement server hears the newest notice, whatever it was).
    auto left = std::make_shared<std::atomic<std::size_t>>(engines_.size());
    for (auto& e : engines_)
      e->post([this, ep = e.get(), members, processes = m.processes, left, epoch = m.epoch] {
        restart_rounds(*ep, members, static_cast<std::uint32_t>(processes));
        if (left->fetch_sub(1) == 1) control_.tell(wire::msg::membership_ack, epoch);
      });
  }
  if (m.joined >= 0) {
    log_.info("worker {} joined the job: {} worker machines (membership epoch {})", m.joined,
              m.members.size(), m.epoch);
  } else {
    const auto line = fmt::format("worker {} removed from the job ({}): {} worker machines go "
                                  "on (membership epoch {}); rounds in flight start over "
                                  "without it",
                                  m.removed, m.why, m.members.size(), m.epoch);
    if (m.lost)
      log_.warn("{}", line);
    else
      log_.info("{}", line);
  }
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
