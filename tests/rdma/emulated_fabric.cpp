// The emulated fabric: its shared state's helpers (violations, events, completions, the queue
// pair's error state), the progress thread that plays the NIC, and the controls and faults a
// test sets (emulated_verbs.hpp says what is modelled). The verbs' data path is in
// emulated_data_path.cpp.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

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

std::uint64_t checksum(const std::byte* p, std::size_t n) {
  // FNV-1a over 8-byte words: cheap enough to run over every send twice, and each step is a
  // bijection of the word, so any one changed word changes the sum.
  std::uint64_t h = 0xcbf29ce484222325ull;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; ++i) h = (h ^ std::to_integer<std::uint64_t>(p[i])) * 0x100000001b3ull;
  return h ^ n;
}

void state::release(buffer_hold& h) {
  if (h.region) --h.region->in_use;
  h.region = nullptr;
}

// The NIC's own write into bytes a send still holds is not the caller's doing. Once the NIC
// has read the send (its entry is in a queue), the new bytes are its new baseline: the emulation
// has no retransmission that would read them again. Before that, the send would carry them:
// the check at the NIC's read reports it, naming the peer's write.
void state::landed(const std::byte* p, std::size_t n) {
  auto overlaps = [&](const buffer_hold& h) {
    return h.region && h.checked && p < h.addr + h.length && h.addr < p + n;
  };
  for (auto* q : cqs)
    for (auto& e : q->entries)
      if (overlaps(e.hold)) e.hold.sum = checksum(e.hold.addr, e.hold.length);
  for (auto* qp : qps)
    for (auto& w : qp->sends)
      if (overlaps(w.hold)) w.hold.peer_wrote = true;
}

void state::push_completion(queue_pair* qp, verbs::work_completion wc, bool is_send,
                            buffer_hold hold) {
  auto* q = qp->cq;
  if (q->entries.size() >= q->capacity) {
    // Found by the NIC, not at a call: recorded, and the pair fails as on a CQ error.
    violations.push_back(fmt::format(
        "completion queue overrun ({} entries) on the {}: size the queue for every work "
        "request that can be outstanding on it",
        q->capacity, describe(qp->id)));
    release(hold);
    to_error(qp);
    return;
  }
  auto visible = clock::now();
  for (const auto& s : slows)
    if (matches(s.e, qp->id)) visible += s.delay;
  q->entries.push_back({wc, visible, qp, is_send, hold});
  if (q->armed && visible <= clock::now()) notify(q);
}

void state::to_error(queue_pair* qp) {
  if (qp->st == queue_pair::qp_state::error) return;
  qp->st = queue_pair::qp_state::error;
  // Sends not yet carried out flush in order; their buffers stay the NIC's until reaped.
  while (!qp->sends.empty()) {
    auto p = std::move(qp->sends.front());
    qp->sends.pop_front();
    const auto op = p.wr.opcode == verbs::send_opcode::write_with_imm ? verbs::wc_opcode::write
                                                                      : verbs::wc_opcode::send;
    push_completion(qp, {p.wr.wr_id, verbs::wc_status::flushed, op, 0, 0}, true, p.hold);
  }
  while (!qp->recvs.empty()) {
    auto [r, hold] = qp->recvs.front();
    qp->recvs.pop_front();
    push_completion(qp, {r.wr_id, verbs::wc_status::flushed, verbs::wc_opcode::recv, 0, 0},
                    false, hold);
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

void state::run_engine() {
  std::unique_lock lock(mu);
  std::vector<queue_pair*> due;
  while (!stopping) {
    const auto now = clock::now();
    // Bounded: a slow peer's completions and `stopping` are looked at even when nobody posts.
    auto wake = now + std::chrono::milliseconds(20);
    due.clear();
    for (auto* qp : qps) {
      if (qp->sends.empty()) continue;
      if (qp->sends.front().due <= now)
        due.push_back(qp);
      else
        wake = std::min(wake, qp->sends.front().due);
    }
    for (auto* q : cqs) {
      if (!q->armed || q->entries.empty()) continue;
      if (q->entries.front().visible <= now)
        notify(q);
      else
        wake = std::min(wake, q->entries.front().visible);
    }
    if (due.empty()) {
      engine_cv.wait_until(lock, wake);
      continue;
    }
    // Queue pairs overtake one another; each runs its own requests in order, one a round.
    std::shuffle(due.begin(), due.end(), random);
    for (auto* qp : due)
      if (!qp->sends.empty()) carry_out(qp);  // the lock is held: no pair goes meanwhile
  }
}

// ---- fabric ----

fabric::fabric() : state_(std::make_unique<state>()) {
  state_->engine = std::thread([s = state_.get()] { s->run_engine(); });
}
fabric::~fabric() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->engine_cv.notify_all();
  if (state_->engine.joinable()) state_->engine.join();
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
  state_->engine_cv.notify_all();
}
void fabric::set_timing(timing t) {
  std::lock_guard lock(state_->mu);
  if (t.max < t.min) t.max = t.min;
  state_->timing = t;
  state_->random.seed(t.seed);
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
std::size_t fabric::work_in_flight() const {
  std::lock_guard lock(state_->mu);
  std::size_t n = 0;
  for (auto* qp : state_->qps) n += qp->sends.size();
  return n;
}
std::vector<fabric::region_info> fabric::regions() const {
  std::lock_guard lock(state_->mu);
  std::vector<region_info> out;
  for (const auto& [key, m] : state_->lkeys) out.push_back({m->addr, m->length, m->access, m->lkey, m->rkey});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.addr < b.addr; });
  return out;
}

}  // namespace bps::test::emu
