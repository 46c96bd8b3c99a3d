#pragma once
/// @file
/// The scheduler's side of server failover (see rendezvous/scheduler.hpp and
/// docs/reliability.md): servers that join after the cluster formed, vacant ranks, and handing a
/// vacant rank to a replacement. Included at the end of rendezvous/scheduler.hpp.

#include "byteps/rendezvous/scheduler.hpp"

#include <optional>
#include <string>

#include <fmt/core.h>

namespace bps::rendezvous {

// A node is gone without bye: a failure, unless failover covers it (a standby, or a server
// after the cluster formed).
template <class T>
void scheduler<T>::lost_locked(node& n, const std::string& what) {
  if (!failure_.empty()) return;  // the job already failed; nodes leave as they learn it
  if (n.r == role::server && (n.standby || (formed_ && n.rank < 0))) {
    log_.warn("waiting server at {} {}", n.peer, what);
    return;
  }
  if (cfg_.failover() && formed_ && n.r == role::server && n.rank >= 0)
    return server_lost_locked(n, what);
  if (cfg_.elastic() && formed_ && n.r == role::worker)
    return n.joining ? joiner_lost_locked(n, what) : worker_removed_locked(n, what, true);
  node_failed_locked(n, what);
}

// Failover: why a server that says hello after the cluster formed cannot join.
template <class T>
std::optional<std::string> scheduler<T>::late_server_refusal_locked(
    const rendezvous::hello& theirs) const {
  const int k = theirs.requested_rank;
  if (k < 0 || vacant_.is_open(k)) return std::nullopt;
  for (const auto& n : nodes_)
    if (n.alive && n.r == role::server && n.rank < 0 && n.requested == k)
      return fmt::format("a server with BYTEPS_SERVER_ID={} is already waiting to replace "
                         "server {} (at {})",
                         k, k, n.peer);
  // Rank k looks alive (its death may not be noticed yet, e.g. a hung server before the
  // heartbeat timeout): the newcomer waits, and takes the rank if it becomes vacant.
  return std::nullopt;
}

// Failover: server `n` is gone after the cluster formed. Its rank waits for a replacement
// until the failover timeout; check_heartbeats fails the job when it passes.
template <class T>
void scheduler<T>::server_lost_locked(node& n, const std::string& what) {
  const auto why = fmt::format("{} {}", describe(n), what);
  log_.warn("{}; waiting up to {} ms for a replacement (BYTEPS_FAILOVER_TIMEOUT_MS)", why,
            cfg_.failover_timeout.count());
  vacant_.open(n.rank, n.peer, why, clock::now() + cfg_.failover_timeout);
  place_replacements_locked();
}

// Failover: gives every vacant rank a waiting server: one restarted with that
// BYTEPS_SERVER_ID first, else the standby that joined first. Tells every worker.
template <class T>
void scheduler<T>::place_replacements_locked() {
  for (int k : vacant_.ranks()) {
    node* pick = nullptr;
    for (auto& n : nodes_)
      if (n.alive && n.r == role::server && n.rank < 0 && n.requested == k) pick = &n;
    for (auto& n : nodes_)
      if (!pick && n.alive && n.r == role::server && n.rank < 0 && n.standby) pick = &n;
    if (!pick) continue;
    const bool restarted = !pick->standby;
    pick->rank = k;
    pick->standby = false;
    vacant_.close(k);
    table_.rank = k;
    table_.global_rank = 0;
    table_.servers[static_cast<std::size_t>(k)] = {pick->host, pick->port};
    send_locked(pick->link, wire::msg::welcome, rendezvous::encode(table_));
    // Elastic training: the replacement sums over the workers in the job now, not over those
    // the job formed with.
    if (!last_server_notice_.empty())
      send_locked(pick->link, wire::msg::membership, last_server_notice_);
    const rendezvous::server_replaced notice{k, {pick->host, pick->port}};
    for (auto& w : nodes_)
      if (w.alive && !w.left && w.r == role::worker && !w.joining)
        send_locked(w.link, wire::msg::server_replaced, rendezvous::encode(notice));
    log_.warn("server {} replaced by the {} server at {} (listening on {}:{}); the workers "
              "re-send the rounds in flight there",
              k, restarted ? "restarted" : "standby", pick->peer, pick->host, pick->port);
  }
}

// Failover: fails the job when a dead server's rank waited past BYTEPS_FAILOVER_TIMEOUT_MS.
template <class T>
void scheduler<T>::check_vacancies_locked(clock::time_point now) {
  if (auto late = vacant_.overdue(now)) {
    job_failed_locked(fmt::format(
        "{}; no replacement server joined within {} ms (BYTEPS_FAILOVER_TIMEOUT_MS): start a "
        "standby server (BYTEPS_SERVER_STANDBY=1) or restart it with BYTEPS_SERVER_ID={}; the "
        "job cannot continue",
        late->why, cfg_.failover_timeout.count(), late->rank));
  }
}

}  // namespace bps::rendezvous
