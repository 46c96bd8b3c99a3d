#pragma once
/// @file
/// The communicator's side of server failover (the protocol is in worker/failover.hpp): keep
/// each answer, notice a lost server, wait for its replacement, and re-send there what the dead
/// server held. Included at the end of worker/communicator.hpp.

#include "byteps/worker/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace bps {

// I/O thread: the answer for `h` is complete in the partition's kept sum; the caller's buffer
// gets a copy (averaged if asked). Nothing else touches the kept bytes meanwhile: they are not
// `valid` while being written, and a replacement's link starts only after this one closed.
template <Transport T, LocalCollective L, Partitioner P, Scheduler S>
void Communicator<T, L, P, S>::answered_kept(const wire::header& h, op_ptr op,
                                             std::span<std::byte> payload) {
  const key_id id{h.key, h.part};
  std::span<std::byte> dest;
  {
    std::lock_guard lock(mu_);
    auto* p = ops_.awaiting(id);
    if (p == nullptr || p->op != op || op->failure) {
      if (p != nullptr && p->op == op) p->receiving = false;
      --op->receiving;
      ops_.release_if_done(op);
      return;
    }
    dest = op->data.subspan(p->offset, p->bytes);
  }
  std::memcpy(dest.data(), payload.data(), dest.size());
  if (op->average)
    reduce::scale(dest.data(), dest.size() / dtype_size(op->type), op->type, 1.0 / global_size_);
  std::lock_guard lock(mu_);
  worker::kept_sum& kept = ops_.at(h.key).kept[h.part];
  kept.round = h.round;
  kept.valid = true;
  if (auto* p = ops_.awaiting(id); p != nullptr && p->op == op) p->receiving = false;
  --op->receiving;
  ops_.answered(id, op);
}

// The link to `server` dropped: wait for the scheduler's `server_replaced`, bounded.
template <Transport T, LocalCollective L, Partitioner P, Scheduler S>
void Communicator<T, L, P, S>::server_down_locked(int server, const std::string& reason) {
  auto& slot = servers_[static_cast<std::size_t>(server)];
  slot.up = false;
  slot.down_since = clock::now();
  slot.down_reason = reason;
  const auto limit = cfg_.failover_timeout + cfg_.heartbeat_timeout;
  log_.warn("lost server {} at {}: {}; waiting up to {} ms for its replacement "
            "(BYTEPS_FAILOVER_TIMEOUT_MS)",
            server, slot.address, reason, cfg_.failover_timeout.count());
  failover_->post_at(slot.down_since + limit,
                     [this, server, generation = slot.generation](bool cancelled) {
                       if (!cancelled) replacement_overdue(server, generation);
                     });
}

// Failover thread. The scheduler fails the job itself when no replacement comes; this is the
// worker's own bound, for when its link to a server dropped but the scheduler saw nothing.
template <Transport T, LocalCollective L, Partitioner P, Scheduler S>
void Communicator<T, L, P, S>::replacement_overdue(int server, std::uint64_t generation) {
  std::lock_guard lock(mu_);
  const auto& slot = servers_[static_cast<std::size_t>(server)];
  if (slot.up || slot.generation != generation || closing_) return;
  die_locked(fmt::format("lost server {} at {} ({}), and no replacement came within {} ms "
                         "(BYTEPS_FAILOVER_TIMEOUT_MS={} plus BYTEPS_HEARTBEAT_TIMEOUT_MS={})",
                         server, slot.address, slot.down_reason,
                         (cfg_.failover_timeout + cfg_.heartbeat_timeout).count(),
                         cfg_.failover_timeout.count(), cfg_.heartbeat_timeout.count()));
}

// The scheduler's I/O thread: hand the reconnect to the failover thread (connecting blocks).
template <Transport T, LocalCollective L, Partitioner P, Scheduler S>
void Communicator<T, L, P, S>::on_server_replaced(const rendezvous::frame& f) {
  rendezvous::server_replaced m;
  try {
    m = rendezvous::decode_server_replaced(f.payload);
  } catch (const wire::decode_error& e) {
    std::lock_guard lock(mu_);
    return die_locked(fmt::format("malformed server_replaced from the scheduler: {}", e.what()));
  }
  std::uint64_t notice = 0;
  {
    std::lock_guard lock(mu_);
    notice = ++replacement_notices_;
    if (m.rank >= 0 && static_cast<std::size_t>(m.rank) < servers_.size())
      servers_[static_cast<std::size_t>(m.rank)].latest_notice = notice;
  }
  failover_->post_at(clock::now(), [this, m, notice](bool cancelled) {
    if (!cancelled) reconnect(m.rank, m.where, notice);
  });
}

// Failover thread: server `server` now listens at `where`. Drop the old link (waiting, bounded,
// until it reported its close, so no answer is still being written), connect, and re-send.
template <Transport T, LocalCollective L, Partitioner P, Scheduler S>
void Communicator<T, L, P, S>::reconnect(int server, const rendezvous::address& where,
                                         std::uint64_t notice) {
  const auto address = fmt::format("{}:{}", where.host, where.port);
  link_ptr old;
  std::uint64_t generation = 0;
  {
    std::unique_lock lock(mu_);
    if (closing_ || !dead_.empty()) return;
    if (server < 0 || static_cast<std::size_t>(server) >= servers_.size())
      return die_locked(fmt::format("the scheduler replaced server {}, but this job has {} "
                                    "servers",
                                    server, servers_.size()));
    auto& slot = servers_[static_cast<std::size_t>(server)];
    if (slot.latest_notice != notice) return;  // replaced again since: go to the newest
    if (slot.up) {  // the scheduler saw it die first (it stopped responding); drop it now
      slot.up = false;
      slot.down_since = clock::now();
      slot.down_reason = "replaced by the scheduler";
    }
    old = slot.link;
    generation = slot.generation;
  }
  old->close();
  {
    std::unique_lock lock(mu_);
    const auto& slot = servers_[static_cast<std::size_t>(server)];
    if (!links_cv_.wait_for(lock, std::chrono::seconds(5), [&] { return slot.link_closed; }))
      log_.warn("the old link to server {} did not report its close within 5 s", server);
  }
  // Connect in short tries, so that a newer notice (this replacement died too) or a shutdown
  // ends the attempt early; BYTEPS_CONNECT_TIMEOUT_MS bounds them all.
  link_ptr fresh;
  const auto deadline = clock::now() + cfg_.connect_timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    try {
      fresh = transport_.connect(where.host, where.port,
                                 std::clamp(left, std::chrono::milliseconds(1),
                                            std::chrono::milliseconds(500)));
      break;
    } catch (const communicator_error& e) {
      std::lock_guard lock(mu_);
      if (closing_ || !dead_.empty()) return;
      if (servers_[static_cast<std::size_t>(server)].latest_notice != notice) return;  // died too
      if (clock::now() >= deadline)
        return die_locked(fmt::format("cannot reach the replacement of server {} at {}: {} "
                                      "(BYTEPS_CONNECT_TIMEOUT_MS={})",
                                      server, address, e.what(), cfg_.connect_timeout.count()));
    }
  }
  std::pair<std::size_t, std::size_t> sent;
  {
    std::lock_guard lock(mu_);
    auto& slot = servers_[static_cast<std::size_t>(server)];
    if (closing_ || !dead_.empty() || slot.latest_notice != notice) return fresh->close();
    slot.generation = generation + 1;
    slot.link = fresh;
    slot.link_closed = false;
    slot.address = address;
    slot.up = true;
    start_server_link(fresh, server, slot.generation);
    sent = resend_locked(server);
    dispatch_locked();
  }
  log_.warn("server {} replaced by {}: re-sent {} sum(s) this worker had received and {} "
            "partition(s) in flight",
            server, address, sent.first, sent.second);
}

// For every partition that `server` owns: the tensor's name, the kept sum, and the pending push
// (if it already left the scheduler's queue; the queue sends the others). Returns (sums, pushes).
template <Transport T, LocalCollective L, Partitioner P, Scheduler S>
std::pair<std::size_t, std::size_t> Communicator<T, L, P, S>::resend_locked(int server) {
  std::size_t sums = 0, pushes = 0;
  const auto& link = servers_[static_cast<std::size_t>(server)].link;
  ops_.for_each_tensor([&](std::uint64_t key, worker::tensor& t) {
    t.declared[static_cast<std::size_t>(server)] = false;
    for (std::uint32_t i = 0; i < t.parts.size(); ++i) {
      if (placement_.server_for(key, i) != server) continue;
      const worker::kept_sum& kept = t.kept[i];
      auto* p = ops_.awaiting(key_id{key, i});
      const bool push = p != nullptr && p->dispatched && !p->op->failure;
      if (!kept.valid && !push) continue;
      declare_locked(t, key, server);
      if (kept.valid) {
        wire::header h;
        h.type = wire::msg::sum_offer;
        h.sender = static_cast<std::uint32_t>(rank_);
        h.key = key;
        h.part = i;
        h.dtype = static_cast<std::uint32_t>(t.type);
        h.round = kept.round;
        h.tensor_bytes = t.bytes;
        h.offset = t.parts[i].offset;
        // A copy: the kept bytes may be overwritten by the next answer while this is queued.
        auto copy = std::make_shared<std::vector<std::byte>>(kept.bytes);
        link->send(h, *copy, [copy] {});
        ++sums;
      }
      if (push) {
        ++p->op->in_transport;
        link->send(push_header(t, key, i, *p), p->op->data.subspan(p->offset, p->bytes),
                   [this, op = p->op] { repushed(op); });
        ++pushes;
      }
    }
  });
  return {sums, pushes};
}

// A re-push left (or was dropped): it took no scheduling credit, so it returns none.
template <Transport T, LocalCollective L, Partitioner P, Scheduler S>
void Communicator<T, L, P, S>::repushed(const op_ptr& op) {
  std::lock_guard lock(mu_);
  --op->in_transport;
  ops_.release_if_done(op);
}

}  // namespace bps
