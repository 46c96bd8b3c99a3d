// The emulation's control path: devices, protection domains and memory regions, channels,
// completion queues, queue pairs, and the connection manager's calls and events.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include <byteps/core/error.hpp>
#include <fmt/format.h>

#include "emulated_state.hpp"

namespace bps::test::emu {

namespace {
constexpr int rejected_status = 28;  // what rdma_cm reports for a refused or rejected connect
}

emulated_verbs::emulated_verbs(const options& opts)
    : net_(opts.net ? opts.net : fabric::shared_default()), host_(opts.host) {}

std::vector<std::string> emulated_verbs::device_names() {
  std::lock_guard lock(net_->impl().mu);
  return net_->impl().devices;
}

std::optional<std::size_t> emulated_verbs::memlock_limit() {
  std::lock_guard lock(net_->impl().mu);
  return net_->impl().memlock;
}

emulated_verbs::device* emulated_verbs::open_device(std::string_view name, int port, int gid_index) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (s.devices.empty()) throw communicator_error("rdma: no RDMA device found (ibv_get_device_list is empty)");
  const std::string chosen = name.empty() ? s.devices.front() : std::string(name);
  if (std::find(s.devices.begin(), s.devices.end(), chosen) == s.devices.end())
    throw communicator_error(fmt::format("rdma: no device named '{}' (devices: {})", chosen,
                                         fmt::join(s.devices, ", ")));
  if (port != 1)
    throw communicator_error(fmt::format("rdma: ibv_query_port ({} port {}) failed: Invalid argument",
                                         chosen, port));
  if (gid_index >= 2)
    throw communicator_error(fmt::format(
        "rdma: BYTEPS_RDMA_GID_INDEX = {} is past the GID table of {} port 1 (2 entries)",
        gid_index, chosen));
  ++s.live;
  return new device{chosen, port, gid_index < 0 ? 1 : gid_index, 0};  // index 1 is RoCE v2
}

verbs::port_info emulated_verbs::port(device* d) {
  std::lock_guard lock(net_->impl().mu);
  return {d->name, d->port, net_->impl().mtu, true, d->gid_index, d->gid_index == 1};
}

void emulated_verbs::close_device(device* d) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (d->regions != 0)
    s.violate(fmt::format("ibv_dealloc_pd on {} with {} regions still registered", d->name, d->regions));
  --s.live;
  delete d;
}

emulated_verbs::mr* emulated_verbs::reg_mr(device* d, std::span<std::byte> memory, unsigned access) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (memory.empty()) s.violate("ibv_reg_mr of an empty range");
  constexpr unsigned known = verbs::local_write | verbs::remote_write | verbs::remote_read;
  if (access & ~known)
    s.violate(fmt::format("ibv_reg_mr on {} with unknown access bits {:#x}", d->name, access & ~known));
  // As ibv_reg_mr: a NIC may write a remote peer's bytes only where it may write locally.
  if ((access & verbs::remote_write) && !(access & verbs::local_write))
    s.violate(fmt::format(
        "ibv_reg_mr of {} bytes on {} with remote write but without local write: Invalid "
        "argument (EINVAL); ask for IBV_ACCESS_LOCAL_WRITE with IBV_ACCESS_REMOTE_WRITE",
        memory.size(), d->name));
  if (s.memlock && s.pinned + memory.size() > *s.memlock)
    throw communicator_error(fmt::format(
        "rdma: ibv_reg_mr of {} bytes on {} failed: Cannot allocate memory (the locked-memory "
        "limit is too low: raise RLIMIT_MEMLOCK, e.g. `ulimit -l unlimited`)",
        memory.size(), d->name));
  // Exactly the access asked for: nothing added, so a missing flag shows at its first use.
  auto* m = new mr{d, memory.data(), memory.size(), access, s.next_lkey++, s.next_rkey++, 0};
  s.lkeys[m->lkey] = m;
  s.rkeys[m->rkey] = m;
  s.pinned += memory.size();
  ++d->regions;
  ++s.live;
  return m;
}
std::uint32_t emulated_verbs::lkey(mr* m) { return m->lkey; }
std::uint32_t emulated_verbs::rkey(mr* m) { return m->rkey; }
void emulated_verbs::dereg_mr(mr* m) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  // A NIC still reading or writing the region would fault: refuse, as the kernel does (EBUSY).
  if (m->in_use > 0)
    s.violate(fmt::format(
        "ibv_dereg_mr of the {}-byte region (lkey {:#x}, rkey {:#x}) on {} with {} posted work "
        "request(s) still using it: Device or resource busy (EBUSY); reap their completions or "
        "destroy the queue pair first",
        m->length, m->lkey, m->rkey, m->dev->name, m->in_use));
  s.lkeys.erase(m->lkey);
  s.rkeys.erase(m->rkey);
  s.pinned -= m->length;
  --m->dev->regions;
  --s.live;
  delete m;
}

emulated_verbs::comp_channel* emulated_verbs::create_comp_channel(device*) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  ++s.live;
  return new comp_channel{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), {}, 0};
}
int emulated_verbs::fd(comp_channel* c) { return c->efd; }
void emulated_verbs::destroy_comp_channel(comp_channel* c) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (c->queues) s.violate("ibv_destroy_comp_channel with completion queues still on it");
  ::close(c->efd);
  --s.live;
  delete c;
}

emulated_verbs::cq* emulated_verbs::create_cq(device*, comp_channel* c, int depth) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (depth < 1) s.violate("ibv_create_cq with a depth below 1");
  auto* q = new cq{c, static_cast<std::size_t>(depth), {}, false, 0};
  ++c->queues;
  s.cqs.insert(q);
  ++s.live;
  return q;
}
void emulated_verbs::destroy_cq(cq* q) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (q->qps) s.violate("ibv_destroy_cq with a queue pair still using it");
  auto& ev = q->channel->events;
  ev.erase(std::remove(ev.begin(), ev.end(), q), ev.end());
  --q->channel->queues;
  s.cqs.erase(q);
  --s.live;
  delete q;
}

emulated_verbs::event_channel* emulated_verbs::create_event_channel() {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  ++s.live;
  return new event_channel{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), {}, 0};
}
int emulated_verbs::fd(event_channel* c) { return c->efd; }
void emulated_verbs::destroy_event_channel(event_channel* c) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (c->ids) s.violate("rdma_destroy_event_channel with ids still on it");
  ::close(c->efd);
  --s.live;
  delete c;
}

emulated_verbs::cm_id* emulated_verbs::create_id(event_channel* c, void* ctx) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  auto* id = new cm_id;
  id->ch = c;
  id->context = ctx;
  id->host = host_;
  ++c->ids;
  ++s.live;
  return id;
}
void* emulated_verbs::context(cm_id* id) { return id->context; }
void emulated_verbs::set_context(cm_id* id, void* ctx) { id->context = ctx; }

void emulated_verbs::destroy_id(cm_id* id) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (id->qp) s.violate("rdma_destroy_id with its queue pair not destroyed");
  if (id->listening) s.listeners.erase(id->port);
  if (id->peer && id->peer->peer == id) {
    // The other end learns of it as of a disconnect (a destroyed id sends a DREQ first).
    if (id->connected) s.tear_down(id);
    id->peer->peer = nullptr;
  }
  auto& events = id->ch->events;  // as rdma_destroy_id: no event names the id afterwards
  std::erase_if(events, [id](const auto& e) { return e.id == id || e.listen_id == id; });
  --id->ch->ids;
  --s.live;
  delete id;
}

std::uint16_t emulated_verbs::listen(cm_id* id, const std::string& host, std::uint16_t port) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (port == 0)
    while (s.listeners.count(port = s.next_port++)) {}
  if (s.listeners.count(port))
    throw communicator_error(fmt::format("rdma: rdma_bind_addr ({}:{}) failed: Address already in use", host, port));
  s.listeners[port] = id;
  id->listening = true;
  id->port = port;
  return port;
}

void emulated_verbs::resolve_addr(cm_id* id, const std::string& host, std::uint16_t port,
                                  std::chrono::milliseconds) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  id->dest_host = host;
  id->dest_port = port;
  id->where = {port, side::active};
  if (auto it = s.unreachable.find(host); it != s.unreachable.end() && it->second > 0) {
    --it->second;
    return s.push_event(id->ch, {verbs::cm_event_type::addr_error, id, nullptr, -113, {}});
  }
  id->addr_resolved = true;
  s.push_event(id->ch, {verbs::cm_event_type::addr_resolved, id, nullptr, 0, {}});
}

void emulated_verbs::resolve_route(cm_id* id, std::chrono::milliseconds) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (!id->addr_resolved) s.violate("rdma_resolve_route before ADDR_RESOLVED");
  id->route_resolved = true;
  s.push_event(id->ch, {verbs::cm_event_type::route_resolved, id, nullptr, 0, {}});
}

void emulated_verbs::create_qp(cm_id* id, device* d, cq* q, verbs::qp_caps caps) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (id->qp) s.violate("rdma_create_qp on an id that has a queue pair");
  if (!id->route_resolved && !id->peer) s.violate("rdma_create_qp before the route is resolved");
  if (caps.send_depth < 1 || caps.recv_depth < 1) s.violate("rdma_create_qp with a depth below 1");
  auto* qp = new queue_pair;
  qp->id = id;
  qp->cq = q;
  qp->dev = d;
  qp->caps = caps;
  id->qp = qp;
  ++q->qps;
  s.qps.insert(qp);
  ++s.live;
}

void emulated_verbs::destroy_qp(cm_id* id) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  auto* qp = id->qp;
  if (!qp) return;
  // Its work requests are gone with it (as in verbs, without completions): their buffers are
  // free again, and entries already completed no longer name the pair.
  for (auto& e : qp->cq->entries)
    if (e.qp == qp) {
      e.qp = nullptr;
      s.release(e.hold);
    }
  for (auto& p : qp->sends) s.release(p.hold);
  for (auto& r : qp->recvs) s.release(r.second);
  --qp->cq->qps;
  s.qps.erase(qp);
  id->qp = nullptr;
  --s.live;
  delete qp;
}

void emulated_verbs::connect(cm_id* id, std::span<const std::byte> data) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (!id->qp) s.violate("rdma_connect on an id without a queue pair");
  if (!id->route_resolved) s.violate("rdma_connect before ROUTE_RESOLVED");
  id->port = s.next_port++;  // the source port peers see
  auto reject = [&] {
    s.push_event(id->ch, {verbs::cm_event_type::rejected, id, nullptr, rejected_status, {}});
  };
  auto it = s.listeners.find(id->dest_port);
  if (it == s.listeners.end()) return reject();
  if (auto r = s.rejects.find(id->dest_port); r != s.rejects.end() && r->second > 0) {
    --r->second;
    return reject();
  }
  auto* listener = it->second;
  id->where.connection = s.connections[id->dest_port]++;
  auto* child = new cm_id;
  child->ch = listener->ch;
  child->context = listener->context;
  child->host = listener->host;
  child->port = listener->port;
  child->peer = id;
  child->where = {listener->port, side::passive, id->where.connection};
  ++child->ch->ids;
  ++s.live;
  id->peer = child;
  s.push_event(listener->ch, {verbs::cm_event_type::connect_request, child, listener, 0,
                              std::vector<std::byte>(data.begin(), data.end())});
}

void emulated_verbs::accept(cm_id* id, std::span<const std::byte> data) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (!id->qp) s.violate("rdma_accept on an id without a queue pair");
  auto* active = id->peer;
  if (!active || !active->qp) return;  // the connecting side gave up: nothing to establish
  id->qp->st = active->qp->st = queue_pair::qp_state::rts;
  id->connected = active->connected = true;
  s.push_event(id->ch, {verbs::cm_event_type::established, id, nullptr, 0, {}});
  s.push_event(active->ch, {verbs::cm_event_type::established, active, nullptr, 0,
                            std::vector<std::byte>(data.begin(), data.end())});
}

void emulated_verbs::reject(cm_id* id, std::span<const std::byte> data) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (auto* active = id->peer) {
    active->peer = nullptr;
    s.push_event(active->ch, {verbs::cm_event_type::rejected, active, nullptr, rejected_status,
                              std::vector<std::byte>(data.begin(), data.end())});
  }
  id->peer = nullptr;
}

void emulated_verbs::disconnect(cm_id* id) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (id->connected) s.tear_down(id);
  if (id->qp) s.to_error(id->qp);  // rdma_disconnect moves the pair to error in any state
}

std::optional<verbs::cm_event<emulated_verbs::cm_id>> emulated_verbs::get_cm_event(event_channel* c) {
  auto& s = net_->impl();
  std::lock_guard lock(s.mu);
  if (c->events.empty()) {
    drain_fd(c->efd);
    return std::nullopt;
  }
  auto e = std::move(c->events.front());
  c->events.pop_front();
  if (c->events.empty()) drain_fd(c->efd);
  return e;
}

std::string emulated_verbs::peer_address(cm_id* id) {
  std::lock_guard lock(net_->impl().mu);
  if (id->where.which == side::active && id->dest_port)
    return fmt::format("{}:{}", id->dest_host, id->dest_port);
  if (id->peer) return fmt::format("{}:{}", id->peer->host, id->peer->port);
  return "unknown peer";
}
std::string emulated_verbs::local_host(cm_id* id) { return id->host; }

}  // namespace bps::test::emu
