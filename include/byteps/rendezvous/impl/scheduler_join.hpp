#pragma once
/// @file
/// How nodes join the scheduler (see rendezvous/scheduler.hpp): who has joined so far,
/// whether a node that says hello may join, and the ranks and server table sent to everyone
/// once the cluster is complete. Included at the end of rendezvous/scheduler.hpp.

#include "byteps/rendezvous/scheduler.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

namespace bps::rendezvous {

template <class T>
int scheduler<T>::count_locked(role r) const {
  int n = 0;
  for (const auto& x : nodes_) n += (x.r == r && x.alive && !x.standby) ? 1 : 0;
  return n;
}

// Machines that have at least one worker here: by DMLC_WORKER_ID, plus one per worker that
// named none (those run one process per machine).
template <class T>
int scheduler<T>::machines_locked(bool full_only) const {
  std::map<int, std::pair<int, int>> seen;  // machine -> (joined, local size)
  int anonymous = 0;
  for (const auto& n : nodes_) {
    if (!n.alive || n.r != role::worker) continue;
    if (n.requested < 0) {
      ++anonymous;
      continue;
    }
    auto& [joined, size] = seen[n.requested];
    ++joined;
    size = n.local_size;
  }
  int machines = anonymous;
  for (const auto& [m, js] : seen) machines += (!full_only || js.first == js.second) ? 1 : 0;
  return machines;
}

template <class T>
bool scheduler<T>::complete_locked() const {
  const int all = machines_locked(false);
  return all == cfg_.num_workers && machines_locked(true) == all &&
         count_locked(role::server) == cfg_.num_servers;
}

// Why a node with these settings cannot join now, if it cannot.
template <class T>
std::optional<std::string> scheduler<T>::refusal_locked(const rendezvous::hello& theirs) const {
  if (theirs.node_role == role::server) {
    if (theirs.standby && !cfg_.failover())
      return std::string("a standby server (BYTEPS_SERVER_STANDBY=1), but failover is off "
                         "(BYTEPS_FAILOVER_TIMEOUT_MS=0): this job has no place for it");
    if (theirs.standby) return std::nullopt;  // counts toward nothing; waits
    if (count_locked(role::server) >= cfg_.num_servers)
      return fmt::format("the job already has {} servers (DMLC_NUM_SERVER={})",
                         cfg_.num_servers, cfg_.num_servers);
    for (const auto& n : nodes_)
      if (n.alive && n.r == role::server && theirs.requested_rank >= 0 &&
          n.requested == theirs.requested_rank)
        return fmt::format("BYTEPS_SERVER_ID={} is already taken by the server at {}",
                           theirs.requested_rank, n.peer);
    return std::nullopt;
  }
  if (theirs.requested_rank >= cfg_.num_workers)
    return fmt::format("DMLC_WORKER_ID={} is past the machines the job forms with (0 .. {}, "
                       "DMLC_NUM_WORKER={}); a worker of a higher machine joins once the job runs",
                       theirs.requested_rank, cfg_.num_workers - 1, cfg_.num_workers);
  if (theirs.requested_rank < 0 && theirs.local_size > 1)
    return fmt::format("a worker with BYTEPS_LOCAL_SIZE={} must set DMLC_WORKER_ID (its "
                       "machine's index)",
                       theirs.local_size);
  bool machine_known = false;
  for (const auto& n : nodes_) {
    if (!n.alive || n.r != role::worker || theirs.requested_rank < 0 ||
        n.requested != theirs.requested_rank)
      continue;
    machine_known = true;
    if (n.local_size != theirs.local_size)
      return fmt::format("BYTEPS_LOCAL_SIZE differs on machine {} (DMLC_WORKER_ID): this "
                         "worker says {}, the worker at {} says {}",
                         theirs.requested_rank, theirs.local_size, n.peer, n.local_size);
    if (n.local_rank == theirs.local_rank)
      return fmt::format("DMLC_WORKER_ID={} BYTEPS_LOCAL_RANK={} is already taken by the "
                         "worker at {}",
                         theirs.requested_rank, theirs.local_rank, n.peer);
  }
  if (!machine_known && machines_locked(false) >= cfg_.num_workers)
    return fmt::format("the job already has {} worker machines (DMLC_NUM_WORKER={})",
                       cfg_.num_workers, cfg_.num_workers);
  return std::nullopt;
}

template <class T>
void scheduler<T>::hello_locked(session& s, std::span<std::byte> payload) {
  if (s.node_index >= 0) throw wire::decode_error("it sent a second hello on one connection");
  if (s.ticket->settled()) return;  // it timed out meanwhile: its link is closing
  const std::string peer = s.link_->peer();
  // Another generation first (its layout may differ), then the proof, then the settings: only
  // a peer that proved the token hears how its settings differ.
  const auto protocol = rendezvous::hello_protocol(payload);
  if (!protocol)
    return refuse_locked(s, fmt::format("a hello of {} bytes, too short to be one",
                                        payload.size()));
  if (*protocol != rendezvous::protocol_version) {
    rendezvous::hello other;
    other.protocol = *protocol;
    return refuse_locked(s, *rendezvous::first_difference(mine_, other, peer));
  }
  const auto parts = rendezvous::split_proof(payload);
  if (!parts ||
      !rendezvous::verify(cfg_.job_token, rendezvous::purpose::scheduler_hello,
                          s.ticket->challenge(), parts->first, parts->second))
    return refuse_locked(s, fmt::format("BYTEPS_JOB_TOKEN differs: the peer at {} does not "
                                        "prove this job's token for this connection (a process "
                                        "of another job, a stranger, or a replayed hello)",
                                        peer));
  rendezvous::hello theirs;
  try {
    theirs = rendezvous::decode_hello(parts->first);
  } catch (const wire::decode_error& e) {
    return refuse_locked(s, std::string("malformed hello: ") + e.what());
  }
  if (auto diff = rendezvous::first_difference(mine_, theirs, peer))
    return refuse_locked(s, *diff);
  if (theirs.node_role == role::scheduler)
    return refuse_locked(s, "a second scheduler tried to join; start one scheduler per job");
  if (formed_ && cfg_.elastic() && theirs.node_role == role::worker)
    return join_running_locked(s, theirs);
  if (formed_ && !(cfg_.failover() && theirs.node_role == role::server))
    return refuse_locked(s, theirs.node_role == role::server
                                ? "the cluster has already formed; a server can join later only "
                                  "as a replacement, with failover on (BYTEPS_FAILOVER_TIMEOUT_MS)"
                                : "the cluster has already formed; start every node of a job "
                                  "together");
  if (auto why = formed_ ? late_server_refusal_locked(theirs) : refusal_locked(theirs))
    return refuse_locked(s, *why);
  node n = node_of(theirs, s.link_);
  // After formation a server with no BYTEPS_SERVER_ID waits like a standby.
  n.standby = theirs.standby || (formed_ && theirs.requested_rank < 0);
  s.node_index = static_cast<int>(nodes_.size());
  nodes_.push_back(std::move(n));
  gate_.passed(*s.ticket);
  // The first heartbeat, now: it tells the node its hello was read, so it starts watching the
  // scheduler's heartbeats at once (a scheduler that stops right after this is noticed within
  // BYTEPS_HEARTBEAT_TIMEOUT_MS, not after the node's connect timeout as well).
  s.link_->send(wire::header{.type = wire::msg::heartbeat}, {}, {});
  if (nodes_.back().standby)
    log_.info("standby server at {} joined; it waits to replace a server that dies",
              nodes_.back().peer);
  else if (formed_ && !vacant_.is_open(theirs.requested_rank))
    log_.warn("a server at {} asks for BYTEPS_SERVER_ID={}, which is alive; it waits in case "
              "that server is dead",
              nodes_.back().peer, theirs.requested_rank);
  else
    log_.info("{} joined ({} of {} worker machines complete, {} of {} servers)",
              describe(nodes_.back()), machines_locked(true), cfg_.num_workers,
              count_locked(role::server), cfg_.num_servers);
  if (formed_) place_replacements_locked();
  cv_.notify_all();
}

template <class T>
void scheduler<T>::assign_and_welcome_locked() {
  formed_ = true;
  // Nodes that left before the cluster formed stay in nodes_ (sessions index it), not alive.
  auto assign = [&](role r, int count) {
    std::vector<bool> taken(static_cast<std::size_t>(count), false);
    for (auto& n : nodes_)
      if (n.alive && n.r == r && !n.standby && n.requested >= 0) {
        n.rank = n.requested;
        taken[static_cast<std::size_t>(n.rank)] = true;
      }
    int next = 0;
    for (auto& n : nodes_) {
      if (!n.alive || n.r != r || n.standby || n.rank >= 0) continue;
      while (taken[static_cast<std::size_t>(next)]) ++next;
      n.rank = next;
      taken[static_cast<std::size_t>(next)] = true;
    }
  };
  assign(role::worker, cfg_.num_workers);
  assign(role::server, cfg_.num_servers);

  rendezvous::welcome table;
  std::vector<std::string> peers;
  bool all_share_memory = true;
  for (const auto& n : nodes_)
    if (n.alive) {
      peers.push_back(n.peer);
      all_share_memory = all_share_memory && n.shares_memory;
    }
  table.in_shared_memory = all_share_memory && all_on_one_host(peers);
  table.num_workers = cfg_.num_workers;
  table.num_servers = cfg_.num_servers;
  table.servers.resize(static_cast<std::size_t>(cfg_.num_servers));
  std::vector<int> local_sizes(static_cast<std::size_t>(cfg_.num_workers), 1);
  for (const auto& n : nodes_) {
    if (!n.alive || n.standby) continue;
    if (n.r == role::server) table.servers[static_cast<std::size_t>(n.rank)] = {n.host, n.port};
    if (n.r == role::worker) {
      local_sizes[static_cast<std::size_t>(n.rank)] = n.local_size;
      table.slices = std::max(table.slices, n.local_size);
    }
  }
  // Global ranks are machine-major: machine m's processes follow those of machines < m.
  std::vector<int> first_rank(local_sizes.size() + 1, 0);
  for (std::size_t m = 0; m < local_sizes.size(); ++m)
    first_rank[m + 1] = first_rank[m] + local_sizes[m];
  workers_ = first_rank.back();
  table.global_size = workers_;
  table.job_id = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32);
  for (auto& n : nodes_) {
    if (!n.alive) continue;
    table.rank = n.rank;
    table.global_rank =
        n.r == role::worker ? first_rank[static_cast<std::size_t>(n.rank)] + n.local_rank : 0;
    if (n.standby) continue;  // welcomed when it takes a dead server's rank
    send_locked(n.link, wire::msg::welcome, rendezvous::encode(table));
  }
  table_ = table;
  log_.info("cluster formed: {} worker processes on {} machines, {} servers{}", workers_,
            cfg_.num_workers, cfg_.num_servers,
            table.in_shared_memory ? ", on one host, payloads through shared memory" : "");
}

}  // namespace bps::rendezvous
