// The emulation's data path: work requests checked when posted (ibv_post_send, ibv_post_recv)
// and carried out later by the fabric's progress thread (the NIC), and completions reaped
// (emulated_verbs.hpp says what is modelled; emulated_fabric.cpp holds the fabric itself).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "emulated_state.hpp"

namespace bps::test::emu {

namespace {

const char* access_name(unsigned access) {
  return access & verbs::remote_write ? "remote write" : "local write";
}

// Why key (an lkey when `remote` is false, else an rkey) does not cover [addr, addr + length)
// with `access`, or "" when it does (then *out is its region).
std::string check_region(state& s, bool remote, std::uint32_t key, const std::byte* addr,
                         std::size_t length, unsigned access, const char* what,
                         const ev::cm_id* id, ev::mr** out) {
  const auto& table = remote ? s.rkeys : s.lkeys;
  const auto& other = remote ? s.lkeys : s.rkeys;
  auto it = table.find(key);
  if (it == table.end())
    return fmt::format("{} with {} {:#x}, which names no registered region{} ({})", what,
                       remote ? "rkey" : "lkey", key,
                       other.count(key) ? fmt::format(" (it is an {}: the wrong key of the region)",
                                                      remote ? "lkey" : "rkey")
                                        : "",
                       s.describe(id));
  auto* m = it->second;
  if (addr < m->addr || addr + length > m->addr + m->length)
    return fmt::format("{} of {} bytes at offset {} of a {}-byte region ({} {:#x}): outside it ({})",
                       what, length, addr - m->addr, m->length, remote ? "rkey" : "lkey", key,
                       s.describe(id));
  if ((m->access & access) != access)
    return fmt::format("{} into a region without {} access ({} {:#x}, registered with access "
                       "{:#x}; register it with the access it is used for) ({})",
                       what, access_name(access), remote ? "rkey" : "lkey", key, m->access,
                       s.describe(id));
  if (out) *out = m;
  return {};
}

std::string changed_buffer(const state& s, const buffer_hold& h, std::uint64_t wr_id,
                           const char* when, const ev::cm_id* id) {
  return fmt::format("the send buffer of work request {:#x} ({} bytes at offset {} of the region "
                     "with lkey {:#x}) changed between ibv_post_send and {} ({}): it belongs to "
                     "the NIC until its completion is reaped",
                     wr_id, h.length, h.addr - h.region->addr, h.region->lkey, when,
                     s.describe(id));
}

}  // namespace

void emulated_verbs::post_recv(cm_id* id, const verbs::recv_wr& wr) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  auto* qp = id->qp;
  if (!qp) s.violate("ibv_post_recv on an id without a queue pair");
  if (qp->recvs.size() >= qp->caps.recv_depth)
    s.violate(fmt::format("ibv_post_recv past the receive queue's depth {} ({})",
                          qp->caps.recv_depth, s.describe(id)));
  ev::mr* m = nullptr;
  if (auto why = check_region(s, false, wr.local.lkey, wr.local.addr, wr.local.length,
                              verbs::local_write, "a receive buffer", id, &m);
      !why.empty())
    s.violate(why);
  // The NIC owns it now: whoever reads it before its completion reads poison, not old bytes.
  if (wr.local.length) std::memset(wr.local.addr, 0xa5, wr.local.length);
  ++m->in_use;
  buffer_hold hold{m, wr.local.addr, wr.local.length, 0, false};
  if (qp->st == queue_pair::qp_state::error) {
    s.push_completion(qp, {wr.wr_id, verbs::wc_status::flushed, verbs::wc_opcode::recv, 0, 0},
                      false, hold);
    return;
  }
  qp->recvs.emplace_back(wr, hold);
}

void emulated_verbs::post_send(cm_id* id, const verbs::send_wr& wr) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  auto* qp = id->qp;
  if (!qp) s.violate("ibv_post_send on an id without a queue pair");
  if (qp->st == queue_pair::qp_state::init)
    s.violate(fmt::format("ibv_post_send before the connection was established ({})",
                          s.describe(id)));
  if (qp->sq_used >= qp->caps.send_depth)
    s.violate(fmt::format("ibv_post_send past the send queue's depth {} ({})", qp->caps.send_depth,
                          s.describe(id)));
  const bool is_write = wr.opcode == verbs::send_opcode::write_with_imm;
  const auto done_op = is_write ? verbs::wc_opcode::write : verbs::wc_opcode::send;
  ev::mr* local = nullptr;
  if (wr.local.length > 0)
    if (auto why = check_region(s, false, wr.local.lkey, wr.local.addr, wr.local.length, 0,
                                "a send's local buffer", id, &local);
        !why.empty())
      s.violate(why);

  // What the peer will make of it, checked now so the caller's call throws: each request ahead
  // of it on this pair consumes one of the peer's receives first. (With credits, as in the
  // transport, a receive is posted before the sender may count on it, so this is exact.)
  auto* peer = id->peer ? id->peer->qp : nullptr;
  if (qp->st == queue_pair::qp_state::rts && peer && peer->st == queue_pair::qp_state::rts &&
      id->connected) {
    const auto ahead = qp->sends.size();
    if (peer->recvs.size() <= ahead)
      s.violate(fmt::format("{} with no receive posted at the peer (receiver not ready; credits "
                            "should have prevented it) ({})",
                            is_write ? "a WRITE WITH IMMEDIATE" : "a SEND", s.describe(id)));
    const auto& r = peer->recvs[ahead].first;
    if (!is_write && wr.local.length > r.local.length)
      s.violate(fmt::format("a SEND of {} bytes into a receive of {} ({})", wr.local.length,
                            r.local.length, s.describe(id)));
    if (is_write) {
      ev::mr* m = nullptr;
      if (auto why = check_region(s, true, wr.rkey, reinterpret_cast<const std::byte*>(wr.remote_addr),
                                  wr.local.length, verbs::remote_write, "a WRITE WITH IMMEDIATE",
                                  id, &m);
          !why.empty())
        s.violate(why);
      if (m->dev != peer->dev)
        s.violate(fmt::format("a WRITE with an rkey of another device ({})", s.describe(id)));
    }
  }

  buffer_hold hold;
  if (local) {
    hold = {local, wr.local.addr, wr.local.length, checksum(wr.local.addr, wr.local.length), true};
    ++local->in_use;
  }
  ++qp->sq_used;
  auto& count = s.counts[{id->where.port, static_cast<int>(id->where.which)}];
  ++(is_write ? count.second : count.first);
  if (qp->st == queue_pair::qp_state::error)
    return s.push_completion(qp, {wr.wr_id, verbs::wc_status::flushed, done_op, 0, 0}, true, hold);

  const auto span = s.timing.max - s.timing.min;
  const auto delay = s.timing.min + std::chrono::microseconds(
      span.count() > 0 ? static_cast<std::int64_t>(s.random() % static_cast<std::uint64_t>(span.count() + 1)) : 0);
  qp->sends.push_back({wr, clock::now() + delay, hold});
  s.engine_cv.notify_one();
}

// On the progress thread, under the lock: what the NIC does with the oldest posted send of qp.
// A broken rule found here has no caller to throw to: it is recorded, and the request fails.
void state::carry_out(queue_pair* qp) {
  auto p = std::move(qp->sends.front());
  qp->sends.pop_front();
  const auto& wr = p.wr;
  auto* id = qp->id;
  const bool is_write = wr.opcode == verbs::send_opcode::write_with_imm;
  const auto done_op = is_write ? verbs::wc_opcode::write : verbs::wc_opcode::send;
  auto fail = [&](verbs::wc_status status) {
    push_completion(qp, {wr.wr_id, status, done_op, 0, 0}, true, p.hold);
    to_error(qp);
  };

  // The NIC reads the buffer now: it must hold what was posted.
  if (p.hold.region && checksum(p.hold.addr, p.hold.length) != p.hold.sum) {
    violations.push_back(changed_buffer(*this, p.hold, wr.wr_id,
                                        p.hold.peer_wrote ? "the NIC reading it (a peer's WRITE "
                                                            "landed in it)"
                                                          : "the NIC reading it",
                                        id));
    p.hold.checked = false;  // one report per request
    return fail(verbs::wc_status::general_error);
  }
  for (auto it = send_faults.begin(); it != send_faults.end(); ++it) {
    if (!matches(it->e, id)) continue;
    if (it->after-- > 0) continue;
    const auto status = it->status;
    send_faults.erase(it);
    return fail(status);
  }

  auto* peer = id->peer ? id->peer->qp : nullptr;
  if (!peer || peer->st != queue_pair::qp_state::rts || !id->connected)
    return fail(verbs::wc_status::retry_exceeded);  // the peer is gone: RC retries, gives up
  if (peer->recvs.empty()) {
    violations.push_back(fmt::format("{} found no receive posted at the peer (receiver not "
                                     "ready; credits should have prevented it) ({})",
                                     is_write ? "a WRITE WITH IMMEDIATE" : "a SEND", describe(id)));
    return fail(verbs::wc_status::rnr_retry_exceeded);
  }
  auto& [r, r_hold] = peer->recvs.front();
  verbs::work_completion arrived{r.wr_id, verbs::wc_status::success, verbs::wc_opcode::recv,
                                 wr.local.length, 0};
  if (is_write) {
    // Checked at the post too; a region deregistered since then shows here.
    ev::mr* m = nullptr;
    auto why = check_region(*this, true, wr.rkey, reinterpret_cast<const std::byte*>(wr.remote_addr),
                            wr.local.length, verbs::remote_write, "a WRITE WITH IMMEDIATE", id, &m);
    if (why.empty() && m->dev != peer->dev) why = "a WRITE with an rkey of another device";
    if (!why.empty()) {
      violations.push_back(why + " (found when the NIC carried it out)");
      return fail(verbs::wc_status::remote_access_error);
    }
    if (wr.local.length) {
      std::memmove(reinterpret_cast<std::byte*>(wr.remote_addr), wr.local.addr, wr.local.length);
      landed(reinterpret_cast<const std::byte*>(wr.remote_addr), wr.local.length);
    }
    arrived.opcode = verbs::wc_opcode::recv_with_imm;
    arrived.imm = wr.imm;
  } else {
    if (wr.local.length > r.local.length) {
      violations.push_back(fmt::format("a SEND of {} bytes into a receive of {} ({})",
                                       wr.local.length, r.local.length, describe(id)));
      return fail(verbs::wc_status::remote_operation_error);
    }
    if (wr.local.length) {
      std::memcpy(r.local.addr, wr.local.addr, wr.local.length);
      landed(r.local.addr, wr.local.length);
    }
  }
  const auto consumed = r_hold;
  peer->recvs.pop_front();
  push_completion(peer, arrived, false, consumed);
  push_completion(qp, {wr.wr_id, verbs::wc_status::success, done_op, wr.local.length, 0}, true,
                  p.hold);

  for (auto it = cuts.begin(); it != cuts.end(); ++it) {
    if (!matches(it->e, id) || --it->sends > 0) continue;
    cuts.erase(it);
    tear_down(id);
    break;
  }
}

int emulated_verbs::poll_cq(cq* q, std::span<verbs::work_completion> out) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  int n = 0;
  std::string changed;
  const auto now = clock::now();
  while (n < static_cast<int>(out.size()) && !q->entries.empty() &&
         q->entries.front().visible <= now) {
    auto& e = q->entries.front();
    if (e.is_send && e.qp) --e.qp->sq_used;  // the slot frees when its completion is reaped
    // Reaped: the caller may reuse the buffer from now on, not before.
    if (e.hold.region && e.hold.checked && changed.empty() &&
        checksum(e.hold.addr, e.hold.length) != e.hold.sum)
      changed = changed_buffer(s, e.hold, e.wc.wr_id, "the reaping of its completion",
                               e.qp ? e.qp->id : nullptr);
    s.release(e.hold);
    out[n++] = e.wc;
    q->entries.pop_front();
  }
  if (!changed.empty()) s.violate(changed);
  return n;
}

void emulated_verbs::req_notify_cq(cq* q) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  q->armed = true;  // as in verbs: only completions added from now on raise the event
  s.engine_cv.notify_one();  // a slow peer's entry may become visible later
}

emulated_verbs::cq* emulated_verbs::get_cq_event(comp_channel* c) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (c->events.empty()) {
    drain_fd(c->efd);
    return nullptr;
  }
  auto* q = c->events.front();
  c->events.pop_front();
  if (c->events.empty()) drain_fd(c->efd);
  return q;
}

}  // namespace bps::test::emu
