#pragma once
/// @file
/// `bps::transport::rdma_core`: the `bps::RdmaVerbs` policy over rdma-core (libibverbs and
/// librdmacm; Debian's libibverbs-dev and librdmacm-dev). Link `byteps::rdma`.
///
/// Each member is the verbs or rdma_cm call its name says, with errno turned into a
/// `communicator_error` that names the call. Both channels are made non-blocking, so the
/// transport's one progress thread sleeps in poll() on their descriptors instead of inside
/// rdma-core. The queue pairs are RC with one sge each way and every send signaled; the
/// connection asks for no RNR retries, since the transport's credits mean a receive is always
/// posted before a peer may use it (a retry would only hide a bug).
///
/// GID: rdma_cm picks the GID from the connection's IP address and the kernel's default RoCE
/// mode (configfs `default_roce_mode`); `port().gid_index` is what this device's table offers
/// for that choice (RoCE v2 first), checked and logged, not forced on rdma_cm.
///
/// Fork: rdma-core's pinned pages are not copy-on-write safe. A program that forks after
/// registering memory must call `ibv_fork_init()` before any other verbs call (or set
/// RDMAV_FORK_SAFE=1); byteps never forks and does not call it for you.
///
/// Never run on an RDMA NIC in this project's CI: compiled and linked against rdma-core, its
/// logic tested through the emulation (tests/rdma/); tests/rdma/test_rdma_device.cpp runs where
/// a device exists.

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/transport/rdma/rdma_core_detail.hpp"
#include "byteps/transport/rdma/verbs.hpp"

namespace bps::transport {

class rdma_core {
 public:
  static constexpr std::string_view name = "rdma-core";
  struct options {};  // rdma-core needs nothing beyond the transport's own options

  struct device {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    verbs::port_info info;
  };
  using mr = ibv_mr;
  using comp_channel = ibv_comp_channel;
  using cq = ibv_cq;
  using event_channel = rdma_event_channel;
  using cm_id = rdma_cm_id;

  explicit rdma_core(const options& = {}) {}

  std::vector<std::string> device_names() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    std::vector<std::string> names;
    if (!list) return names;  // no verbs driver at all: no device
    for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    return names;
  }

  std::optional<std::size_t> memlock_limit() {
    rlimit lim{};
    if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return std::nullopt;
    return static_cast<std::size_t>(lim.rlim_cur);
  }

  device* open_device(std::string_view want, int port, int gid_index) {
    int n = 0;
    ibv_context** list = rdma_get_devices(&n);
    if (!list || n == 0) {
      if (list) rdma_free_devices(list);
      throw communicator_error("rdma: no RDMA device found (ibv_get_device_list is empty)");
    }
    ibv_context* chosen = nullptr;
    std::string seen;
    for (int i = 0; i < n && !chosen; ++i) {
      const std::string dev_name = ibv_get_device_name(list[i]->device);
      seen += (seen.empty() ? "" : ", ") + dev_name;
      ibv_port_attr attr{};
      const bool active = ibv_query_port(list[i], static_cast<std::uint8_t>(port), &attr) == 0 &&
                          attr.state == IBV_PORT_ACTIVE;
      if (want.empty() ? active : dev_name == want) chosen = list[i];
    }
    rdma_free_devices(list);
    if (!chosen)
      throw communicator_error(
          fmt::format("rdma: {} (devices: {}; set BYTEPS_RDMA_DEVICE and BYTEPS_RDMA_PORT)",
                      want.empty() ? fmt::format("no device has port {} active", port)
                                   : fmt::format("no device named '{}'", want),
                      seen));
    auto d = std::make_unique<device>();
    d->ctx = chosen;
    d->info = rdma_core_detail::query_port(chosen, port, gid_index);
    d->pd = ibv_alloc_pd(chosen);
    if (!d->pd) rdma_core_detail::fail("ibv_alloc_pd", d->info.device);
    return d.release();
  }
  verbs::port_info port(device* d) { return d->info; }
  void close_device(device* d) {
    if (d && d->pd) ibv_dealloc_pd(d->pd);
    delete d;  // the context belongs to librdmacm
  }

  mr* reg_mr(device* d, std::span<std::byte> memory, unsigned access) {
    // Exactly what was asked (remote write without local write fails with EINVAL, as the
    // emulation refuses it), so the two backends agree on what a caller must ask for.
    int flags = 0;
    if (access & verbs::local_write) flags |= IBV_ACCESS_LOCAL_WRITE;
    if (access & verbs::remote_write) flags |= IBV_ACCESS_REMOTE_WRITE;
    if (access & verbs::remote_read) flags |= IBV_ACCESS_REMOTE_READ;
    mr* m = ibv_reg_mr(d->pd, memory.data(), memory.size(), flags);
    if (!m) {
      const int e = errno;
      throw communicator_error(fmt::format(
          "rdma: ibv_reg_mr of {} bytes on {} failed: {}{}", memory.size(), d->info.device,
          std::strerror(e),
          e == ENOMEM ? " (the locked-memory limit is too low: raise RLIMIT_MEMLOCK, e.g. "
                        "`ulimit -l unlimited`, docker --ulimit memlock=-1, systemd "
                        "LimitMEMLOCK=infinity)"
                      : ""));
    }
    return m;
  }
  std::uint32_t lkey(mr* m) { return m->lkey; }
  std::uint32_t rkey(mr* m) { return m->rkey; }
  void dereg_mr(mr* m) {
    if (m) ibv_dereg_mr(m);
  }

  comp_channel* create_comp_channel(device* d) {
    comp_channel* c = ibv_create_comp_channel(d->ctx);
    if (!c) rdma_core_detail::fail("ibv_create_comp_channel", d->info.device);
    rdma_core_detail::nonblocking(c->fd, "ibv_create_comp_channel");
    return c;
  }
  int fd(comp_channel* c) { return c->fd; }
  void destroy_comp_channel(comp_channel* c) {
    if (c) ibv_destroy_comp_channel(c);
  }

  cq* create_cq(device* d, comp_channel* c, int depth) {
    cq* q = ibv_create_cq(d->ctx, depth, nullptr, c, 0);
    if (!q) rdma_core_detail::fail("ibv_create_cq", d->info.device);
    return q;
  }
  void destroy_cq(cq* q) {
    if (q) ibv_destroy_cq(q);
  }
  void req_notify_cq(cq* q) {
    if (ibv_req_notify_cq(q, 0) != 0)
      rdma_core_detail::fail("ibv_req_notify_cq", "a completion queue");
  }
  cq* get_cq_event(comp_channel* c) {
    ibv_cq* q = nullptr;
    void* ctx = nullptr;
    if (ibv_get_cq_event(c, &q, &ctx) != 0) return nullptr;  // EAGAIN: none pending
    ibv_ack_cq_events(q, 1);
    return q;
  }
  int poll_cq(cq* q, std::span<verbs::work_completion> out) {
    ibv_wc wc[32];
    const int want = static_cast<int>(std::min<std::size_t>(out.size(), 32));
    const int n = ibv_poll_cq(q, want, wc);
    if (n < 0) throw communicator_error("rdma: ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) out[i] = rdma_core_detail::convert(wc[i]);
    return n;
  }

  event_channel* create_event_channel() {
    event_channel* c = rdma_create_event_channel();
    if (!c) rdma_core_detail::fail("rdma_create_event_channel", "rdma_cm");
    rdma_core_detail::nonblocking(c->fd, "rdma_create_event_channel");
    return c;
  }
  int fd(event_channel* c) { return c->fd; }
  void destroy_event_channel(event_channel* c) {
    if (c) rdma_destroy_event_channel(c);
  }

  cm_id* create_id(event_channel* c, void* context) {
    cm_id* id = nullptr;
    if (rdma_create_id(c, &id, context, RDMA_PS_TCP) != 0)
      rdma_core_detail::fail("rdma_create_id", "rdma_cm");
    return id;
  }
  void* context(cm_id* id) { return id->context; }
  void set_context(cm_id* id, void* context) { id->context = context; }
  void destroy_id(cm_id* id) {
    if (id) rdma_destroy_id(id);
  }

  std::uint16_t listen(cm_id* id, const std::string& host, std::uint16_t port) {
    auto where = rdma_core_detail::resolve(host, port);
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&where)) != 0)
      rdma_core_detail::fail("rdma_bind_addr", host + ":" + std::to_string(port));
    if (rdma_listen(id, 1024) != 0)
      rdma_core_detail::fail("rdma_listen", host + ":" + std::to_string(port));
    return ntohs(rdma_get_src_port(id));
  }
  void resolve_addr(cm_id* id, const std::string& host, std::uint16_t port,
                    std::chrono::milliseconds timeout) {
    auto where = rdma_core_detail::resolve(host, port);
    if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&where),
                          static_cast<int>(timeout.count())) != 0)
      rdma_core_detail::fail("rdma_resolve_addr", host + ":" + std::to_string(port));
  }
  void resolve_route(cm_id* id, std::chrono::milliseconds timeout) {
    if (rdma_resolve_route(id, static_cast<int>(timeout.count())) != 0)
      rdma_core_detail::fail("rdma_resolve_route", peer_address(id));
  }
  void create_qp(cm_id* id, device* d, cq* q, verbs::qp_caps caps) {
    if (id->verbs != d->ctx)
      throw communicator_error(fmt::format(
          "rdma: {} is reached through device {}, not {} (set BYTEPS_RDMA_DEVICE or "
          "DMLC_INTERFACE to agree)",
          peer_address(id), id->verbs ? ibv_get_device_name(id->verbs->device) : "(none)",
          d->info.device));
    ibv_qp_init_attr attr{};
    attr.send_cq = q;
    attr.recv_cq = q;
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = 1;
    attr.cap.max_send_wr = caps.send_depth;
    attr.cap.max_recv_wr = caps.recv_depth;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, d->pd, &attr) != 0)
      rdma_core_detail::fail("rdma_create_qp", peer_address(id));
  }
  void destroy_qp(cm_id* id) {
    if (id && id->qp) rdma_destroy_qp(id);
  }
  void connect(cm_id* id, std::span<const std::byte> data) {
    auto p = rdma_core_detail::conn_param(data);
    if (rdma_connect(id, &p) != 0) rdma_core_detail::fail("rdma_connect", peer_address(id));
  }
  void accept(cm_id* id, std::span<const std::byte> data) {
    auto p = rdma_core_detail::conn_param(data);
    if (rdma_accept(id, &p) != 0) rdma_core_detail::fail("rdma_accept", peer_address(id));
  }
  void reject(cm_id* id, std::span<const std::byte> data) {
    rdma_reject(id, data.data(), static_cast<std::uint8_t>(data.size()));  // best effort
  }
  void disconnect(cm_id* id) { rdma_disconnect(id); }  // EINVAL when not connected: harmless

  std::optional<verbs::cm_event<cm_id>> get_cm_event(event_channel* c) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(c, &ev) != 0) return std::nullopt;  // EAGAIN: none pending
    verbs::cm_event<cm_id> out;
    out.type = rdma_core_detail::convert(ev->event);
    out.id = ev->id;
    out.listen_id = ev->listen_id;
    out.status = ev->status;
    if (ev->param.conn.private_data && ev->param.conn.private_data_len > 0 &&
        (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST || ev->event == RDMA_CM_EVENT_ESTABLISHED ||
         ev->event == RDMA_CM_EVENT_REJECTED)) {
      auto* p = static_cast<const std::byte*>(ev->param.conn.private_data);
      out.private_data.assign(p, p + ev->param.conn.private_data_len);
    }
    rdma_ack_cm_event(ev);
    return out;
  }

  void post_send(cm_id* id, const verbs::send_wr& w) {
    ibv_sge s{reinterpret_cast<std::uintptr_t>(w.local.addr), w.local.length, w.local.lkey};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = w.wr_id;
    wr.sg_list = &s;
    wr.num_sge = w.local.length ? 1 : 0;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (w.opcode == verbs::send_opcode::send) {
      wr.opcode = IBV_WR_SEND;
    } else {
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(w.imm);
      wr.wr.rdma.remote_addr = w.remote_addr;
      wr.wr.rdma.rkey = w.rkey;
    }
    if (const int e = ibv_post_send(id->qp, &wr, &bad); e != 0)
      rdma_core_detail::fail("ibv_post_send", peer_address(id), e);
  }
  void post_recv(cm_id* id, const verbs::recv_wr& w) {
    ibv_sge s{reinterpret_cast<std::uintptr_t>(w.local.addr), w.local.length, w.local.lkey};
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = w.wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    if (const int e = ibv_post_recv(id->qp, &wr, &bad); e != 0)
      rdma_core_detail::fail("ibv_post_recv", peer_address(id), e);
  }

  std::string peer_address(cm_id* id) {
    return rdma_core_detail::address_text(rdma_get_peer_addr(id)) + ":" +
           std::to_string(ntohs(rdma_get_dst_port(id)));
  }
  std::string local_host(cm_id* id) {
    return rdma_core_detail::address_text(rdma_get_local_addr(id));
  }
};

static_assert(bps::RdmaVerbs<rdma_core>);

}  // namespace bps::transport
