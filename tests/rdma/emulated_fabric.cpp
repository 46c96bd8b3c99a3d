// The emulation's data path: work requests carried out when posted, completions, the queue
// pair's error state, and the faults (emulated_verbs.hpp says what is modelled).
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "emulated_state.hpp"

namespace bps::test::emu {

void signal_fd(int efd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(efd, &one, sizeof one);
}
void drain_fd(int efd) {
  std::uint64_t v = 0;
  [[maybe_unused]] auto n = ::read(efd, &v, sizeof v);
}

void state::violate(const std::string& what) {
  violations.push_back(what);
  throw violation("emulated verbs: rule broken: " + what);
}

std::string state::describe(const ev::cm_id* id) const {
  if (!id) return "(no id)";
  return fmt::format("{} end of the connection to port {}",
                     id->where.which == side::active ? "active" : "passive", id->where.port);
}

void state::push_event(ev::event_channel* ch, verbs::cm_event<ev::cm_id> e) {
  ch->events.push_back(std::move(e));
  signal_fd(ch->efd);
}

void state::notify(ev::cq* q) {
  q->armed = false;
  q->channel->events.push_back(q);
  signal_fd(q->channel->efd);
}

void state::push_completion(queue_pair* qp, verbs::work_completion wc, bool is_send) {
  auto* q = qp->cq;
  if (q->entries.size() >= q->capacity)
    violate(fmt::format("completion queue overrun ({} entries) on the {}", q->capacity,
                        describe(qp->id)));
  auto visible = clock::now();
  for (const auto& s : slows)
    if (matches(s.e, qp->id)) visible += s.delay;
  q->entries.push_back({wc, visible, qp, is_send});
  if (q->armed && visible <= clock::now()) notify(q);
}

void state::to_error(queue_pair* qp) {
  if (qp->st == queue_pair::qp_state::error) return;
  qp->st = queue_pair::qp_state::error;
  while (!qp->recvs.empty()) {
    auto r = qp->recvs.front();
    qp->recvs.pop_front();
    push_completion(qp, {r.wr_id, verbs::wc_status::flushed, verbs::wc_opcode::recv, 0, 0}, false);
  }
}

// As rdma_disconnect: the initiator's pair goes to the error state at once; the other end hears
// DISCONNECTED and keeps its pair until it disconnects too (its sends meanwhile find no peer).
void state::tear_down(ev::cm_id* id) {
  for (auto* x : {id, id ? id->peer : nullptr}) {
    if (!x || !x->connected) continue;
    x->connected = false;
    if (x == id && x->qp) to_error(x->qp);
    push_event(x->ch, {verbs::cm_event_type::disconnected, x, nullptr, 0, {}});
  }
}

void state::start_ticker() {
  if (ticker.joinable()) return;
  ticker = std::thread([this] {
    std::unique_lock lock(mu);
    while (!stopping) {
      ticker_cv.wait_for(lock, std::chrono::milliseconds(1));
      const auto now = clock::now();
      for (auto* q : cqs)
        if (q->armed && !q->entries.empty() && q->entries.front().visible <= now) notify(q);
    }
  });
}

// ---- fabric ----

fabric::fabric() : state_(std::make_unique<state>()) {}
fabric::~fabric() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->ticker_cv.notify_all();
  if (state_->ticker.joinable()) state_->ticker.join();
}

std::shared_ptr<fabric> fabric::shared_default() {
  static auto f = std::make_shared<fabric>();
  return f;
}

void fabric::set_devices(std::vector<std::string> names) {
  std::lock_guard lock(state_->mu);
  state_->devices = std::move(names);
}
void fabric::set_memlock_limit(std::optional<std::size_t> bytes) {
  std::lock_guard lock(state_->mu);
  state_->memlock = bytes;
}
void fabric::set_mtu(std::uint32_t bytes) {
  std::lock_guard lock(state_->mu);
  state_->mtu = bytes;
}
void fabric::fail_send(end e, verbs::wc_status status, int after) {
  std::lock_guard lock(state_->mu);
  state_->send_faults.push_back({e, status, after});
}
void fabric::flush(end e) {
  std::lock_guard lock(state_->mu);
  for (auto* qp : state_->qps)
    if (state::matches(e, qp->id)) state_->to_error(qp);
}
void fabric::reject_connects(std::uint16_t port, int count) {
  std::lock_guard lock(state_->mu);
  state_->rejects[port] += count;
}
void fabric::unreachable(const std::string& host, int count) {
  std::lock_guard lock(state_->mu);
  state_->unreachable[host] += count;
}
void fabric::disconnect_after(end e, int sends) {
  std::lock_guard lock(state_->mu);
  state_->cuts.push_back({e, sends});
}
void fabric::slow(end e, std::chrono::milliseconds delay) {
  std::lock_guard lock(state_->mu);
  state_->slows.push_back({e, delay});
  state_->start_ticker();
}

std::vector<std::string> fabric::violations() const {
  std::lock_guard lock(state_->mu);
  return state_->violations;
}
std::size_t fabric::pinned_bytes() const {
  std::lock_guard lock(state_->mu);
  return state_->pinned;
}
std::size_t fabric::live_objects() const {
  std::lock_guard lock(state_->mu);
  return state_->live;
}
std::uint64_t fabric::sends_posted(end e) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->counts.find({e.port, static_cast<int>(e.which)});
  return it == state_->counts.end() ? 0 : it->second.first;
}
std::uint64_t fabric::writes_posted(end e) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->counts.find({e.port, static_cast<int>(e.which)});
  return it == state_->counts.end() ? 0 : it->second.second;
}

// ---- the data path ----

namespace {

// The region `key` names, checked to cover [addr, addr + length) with `access`; or a violation.
ev::mr* region_for(state& s, std::uint32_t key, const std::byte* addr, std::size_t length,
                   unsigned access, const char* what, const ev::cm_id* id) {
  auto it = s.regions.find(key);
  if (it == s.regions.end())
    s.violate(fmt::format("{} with key {:#x}, which names no registered region ({})", what, key,
                          s.describe(id)));
  auto* m = it->second;
  if (addr < m->addr || addr + length > m->addr + m->length)
    s.violate(fmt::format("{} of {} bytes at offset {} of a {}-byte region (key {:#x}): outside it "
                          "({})",
                          what, length, addr - m->addr, m->length, key, s.describe(id)));
  if ((m->access & access) != access)
    s.violate(fmt::format("{} into a region without {} access (key {:#x}, {})", what,
                          access & verbs::remote_write ? "remote write" : "local write", key,
                          s.describe(id)));
  return m;
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
  region_for(s, wr.local.lkey, wr.local.addr, wr.local.length, verbs::local_write,
             "a receive buffer", id);
  if (qp->st == queue_pair::qp_state::error) {
    s.push_completion(qp, {wr.wr_id, verbs::wc_status::flushed, verbs::wc_opcode::recv, 0, 0},
                      false);
    return;
  }
  qp->recvs.push_back(wr);
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
  if (wr.local.length > 0)
    region_for(s, wr.local.lkey, wr.local.addr, wr.local.length, 0, "a send's local buffer", id);
  ++qp->sq_used;
  auto& count = s.counts[{id->where.port, static_cast<int>(id->where.which)}];
  ++(is_write ? count.second : count.first);
  if (qp->st == queue_pair::qp_state::error)
    return s.push_completion(qp, {wr.wr_id, verbs::wc_status::flushed, done_op, 0, 0}, true);

  for (auto it = s.send_faults.begin(); it != s.send_faults.end(); ++it) {
    if (!state::matches(it->e, id)) continue;
    if (it->after-- > 0) continue;
    const auto status = it->status;
    s.send_faults.erase(it);
    s.push_completion(qp, {wr.wr_id, status, done_op, 0, 0}, true);
    s.to_error(qp);
    return;
  }

  auto* peer = id->peer ? id->peer->qp : nullptr;
  if (!peer || peer->st != queue_pair::qp_state::rts || !id->connected) {
    // The peer is gone or in error: RC retries, then gives up.
    s.push_completion(qp, {wr.wr_id, verbs::wc_status::retry_exceeded, done_op, 0, 0}, true);
    s.to_error(qp);
    return;
  }
  if (peer->recvs.empty())
    s.violate(fmt::format("{} with no receive posted at the peer (receiver not ready; credits "
                          "should have prevented it) ({})",
                          is_write ? "a WRITE WITH IMMEDIATE" : "a SEND", s.describe(id)));
  auto r = peer->recvs.front();
  verbs::work_completion arrived{r.wr_id, verbs::wc_status::success, verbs::wc_opcode::recv,
                                 wr.local.length, 0};
  if (is_write) {
    auto* m = region_for(s, wr.rkey, reinterpret_cast<std::byte*>(wr.remote_addr),
                         wr.local.length, verbs::remote_write, "a WRITE WITH IMMEDIATE", id);
    if (m->dev != peer->dev)
      s.violate(fmt::format("a WRITE with an rkey of another device ({})", s.describe(id)));
    if (wr.local.length) std::memmove(reinterpret_cast<std::byte*>(wr.remote_addr), wr.local.addr, wr.local.length);
    arrived.opcode = verbs::wc_opcode::recv_with_imm;
    arrived.imm = wr.imm;
  } else {
    if (wr.local.length > r.local.length)
      s.violate(fmt::format("a SEND of {} bytes into a receive of {} ({})", wr.local.length,
                            r.local.length, s.describe(id)));
    if (wr.local.length) std::memcpy(r.local.addr, wr.local.addr, wr.local.length);
  }
  peer->recvs.pop_front();
  s.push_completion(peer, arrived, false);
  s.push_completion(qp, {wr.wr_id, verbs::wc_status::success, done_op, wr.local.length, 0}, true);

  for (auto it = s.cuts.begin(); it != s.cuts.end(); ++it) {
    if (!state::matches(it->e, id) || --it->sends > 0) continue;
    s.cuts.erase(it);
    s.tear_down(id);
    break;
  }
}

int emulated_verbs::poll_cq(cq* q, std::span<verbs::work_completion> out) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  int n = 0;
  const auto now = clock::now();
  while (n < static_cast<int>(out.size()) && !q->entries.empty() &&
         q->entries.front().visible <= now) {
    auto& e = q->entries.front();
    if (e.is_send && e.qp) --e.qp->sq_used;  // the slot frees when its completion is reaped
    out[n++] = e.wc;
    q->entries.pop_front();
  }
  return n;
}

void emulated_verbs::req_notify_cq(cq* q) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  q->armed = true;  // as in verbs: only completions added from now on raise the event
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
