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

#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <sys/resource.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <span>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "byteps/core/error.hpp"
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
      throw communicator_error(fmt::format(
          "rdma: {} (devices: {}; set BYTEPS_RDMA_DEVICE and BYTEPS_RDMA_PORT)",
          want.empty() ? fmt::format("no device has port {} active", port)
                       : fmt::format("no device named '{}'", want),
          seen));
    auto d = std::make_unique<device>();
    d->ctx = chosen;
    d->info = query_port(chosen, port, gid_index);
    d->pd = ibv_alloc_pd(chosen);
    if (!d->pd) fail("ibv_alloc_pd", d->info.device);
    return d.release();
  }
  verbs::port_info port(device* d) { return d->info; }
  void close_device(device* d) {
    if (d && d->pd) ibv_dealloc_pd(d->pd);
    delete d;  // the context belongs to librdmacm
  }

  mr* reg_mr(device* d, std::span<std::byte> memory, unsigned access) {
    int flags = 0;
    if (access & verbs::local_write) flags |= IBV_ACCESS_LOCAL_WRITE;
    if (access & verbs::remote_write) flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
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
  void dereg_mr(mr* m) { if (m) ibv_dereg_mr(m); }

  comp_channel* create_comp_channel(device* d) {
    comp_channel* c = ibv_create_comp_channel(d->ctx);
    if (!c) fail("ibv_create_comp_channel", d->info.device);
    nonblocking(c->fd, "ibv_create_comp_channel");
    return c;
  }
  int fd(comp_channel* c) { return c->fd; }
  void destroy_comp_channel(comp_channel* c) { if (c) ibv_destroy_comp_channel(c); }

  cq* create_cq(device* d, comp_channel* c, int depth) {
    cq* q = ibv_create_cq(d->ctx, depth, nullptr, c, 0);
    if (!q) fail("ibv_create_cq", d->info.device);
    return q;
  }
  void destroy_cq(cq* q) { if (q) ibv_destroy_cq(q); }
  void req_notify_cq(cq* q) {
    if (ibv_req_notify_cq(q, 0) != 0) fail("ibv_req_notify_cq", "a completion queue");
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
    for (int i = 0; i < n; ++i) out[i] = convert(wc[i]);
    return n;
  }

  event_channel* create_event_channel() {
    event_channel* c = rdma_create_event_channel();
    if (!c) fail("rdma_create_event_channel", "rdma_cm");
    nonblocking(c->fd, "rdma_create_event_channel");
    return c;
  }
  int fd(event_channel* c) { return c->fd; }
  void destroy_event_channel(event_channel* c) { if (c) rdma_destroy_event_channel(c); }

  cm_id* create_id(event_channel* c, void* context) {
    cm_id* id = nullptr;
    if (rdma_create_id(c, &id, context, RDMA_PS_TCP) != 0) fail("rdma_create_id", "rdma_cm");
    return id;
  }
  void* context(cm_id* id) { return id->context; }
  void set_context(cm_id* id, void* context) { id->context = context; }
  void destroy_id(cm_id* id) { if (id) rdma_destroy_id(id); }

  std::uint16_t listen(cm_id* id, const std::string& host, std::uint16_t port) {
    auto where = resolve(host, port);
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&where)) != 0)
      fail("rdma_bind_addr", host + ":" + std::to_string(port));
    if (rdma_listen(id, 1024) != 0) fail("rdma_listen", host + ":" + std::to_string(port));
    return ntohs(rdma_get_src_port(id));
  }
  void resolve_addr(cm_id* id, const std::string& host, std::uint16_t port,
                    std::chrono::milliseconds timeout) {
    auto where = resolve(host, port);
    if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&where),
                          static_cast<int>(timeout.count())) != 0)
      fail("rdma_resolve_addr", host + ":" + std::to_string(port));
  }
  void resolve_route(cm_id* id, std::chrono::milliseconds timeout) {
    if (rdma_resolve_route(id, static_cast<int>(timeout.count())) != 0)
      fail("rdma_resolve_route", peer_address(id));
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
    if (rdma_create_qp(id, d->pd, &attr) != 0) fail("rdma_create_qp", peer_address(id));
  }
  void destroy_qp(cm_id* id) { if (id && id->qp) rdma_destroy_qp(id); }
  void connect(cm_id* id, std::span<const std::byte> data) {
    auto p = conn_param(data);
    if (rdma_connect(id, &p) != 0) fail("rdma_connect", peer_address(id));
  }
  void accept(cm_id* id, std::span<const std::byte> data) {
    auto p = conn_param(data);
    if (rdma_accept(id, &p) != 0) fail("rdma_accept", peer_address(id));
  }
  void reject(cm_id* id, std::span<const std::byte> data) {
    rdma_reject(id, data.data(), static_cast<std::uint8_t>(data.size()));  // best effort
  }
  void disconnect(cm_id* id) { rdma_disconnect(id); }  // EINVAL when not connected: harmless

  std::optional<verbs::cm_event<cm_id>> get_cm_event(event_channel* c) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(c, &ev) != 0) return std::nullopt;  // EAGAIN: none pending
    verbs::cm_event<cm_id> out;
    out.type = convert(ev->event);
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
    if (const int e = ibv_post_send(id->qp, &wr, &bad); e != 0) fail("ibv_post_send", peer_address(id), e);
  }
  void post_recv(cm_id* id, const verbs::recv_wr& w) {
    ibv_sge s{reinterpret_cast<std::uintptr_t>(w.local.addr), w.local.length, w.local.lkey};
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = w.wr_id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    if (const int e = ibv_post_recv(id->qp, &wr, &bad); e != 0) fail("ibv_post_recv", peer_address(id), e);
  }

  std::string peer_address(cm_id* id) {
    return address_text(rdma_get_peer_addr(id)) + ":" + std::to_string(ntohs(rdma_get_dst_port(id)));
  }
  std::string local_host(cm_id* id) { return address_text(rdma_get_local_addr(id)); }

 private:
  [[noreturn]] static void fail(std::string_view call, std::string_view what, int e = errno) {
    throw communicator_error(fmt::format("rdma: {} ({}) failed: {}", call, what, std::strerror(e)));
  }
  static void nonblocking(int fd, std::string_view call) {
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) fail(call, "O_NONBLOCK");
  }
  static sockaddr_storage resolve(const std::string& host, std::uint16_t port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const auto service = std::to_string(port);
    if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0 || !res)
      throw communicator_error(
          fmt::format("rdma: cannot resolve '{}': {}", host, gai_strerror(rc)));
    sockaddr_storage out{};
    std::memcpy(&out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return out;
  }
  static std::string address_text(const sockaddr* a) {
    char text[INET6_ADDRSTRLEN] = "?";
    if (a && a->sa_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof text);
    else if (a && a->sa_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, text, sizeof text);
    return text;
  }
  static rdma_conn_param conn_param(std::span<const std::byte> data) {
    rdma_conn_param p{};
    p.private_data = data.data();
    p.private_data_len = static_cast<std::uint8_t>(data.size());
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 0;  // credits guarantee a posted receive; see the file comment
    return p;
  }
  static verbs::port_info query_port(ibv_context* ctx, int port, int gid_index) {
    verbs::port_info info;
    info.device = ibv_get_device_name(ctx->device);
    info.port = port;
    ibv_port_attr attr{};
    if (ibv_query_port(ctx, static_cast<std::uint8_t>(port), &attr) != 0)
      fail("ibv_query_port", fmt::format("{} port {}", info.device, port));
    info.mtu_bytes = 128u << static_cast<int>(attr.active_mtu);  // IBV_MTU_256 = 1 ... 4096 = 5
    info.ethernet = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
    info.gid_index = gid_index < 0 ? 0 : gid_index;
    if (gid_index >= attr.gid_tbl_len)
      throw communicator_error(fmt::format(
          "rdma: BYTEPS_RDMA_GID_INDEX = {} is past the GID table of {} port {} ({} entries)",
          gid_index, info.device, port, attr.gid_tbl_len));
    for (int i = 0; i < attr.gid_tbl_len && info.ethernet; ++i) {
      ibv_gid_entry entry{};
      if (ibv_query_gid_ex(ctx, static_cast<std::uint32_t>(port), static_cast<std::uint32_t>(i),
                           &entry, 0) != 0)
        continue;
      const bool v2 = entry.gid_type == IBV_GID_TYPE_ROCE_V2;
      if (gid_index == i) info.roce_v2 = v2;
      if (gid_index < 0 && v2) {
        info.gid_index = i;
        info.roce_v2 = true;
        break;
      }
    }
    return info;
  }
  static verbs::work_completion convert(const ibv_wc& wc) {
    verbs::work_completion out;
    out.wr_id = wc.wr_id;
    out.byte_len = wc.byte_len;
    out.imm = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
    switch (wc.status) {
      case IBV_WC_SUCCESS: out.status = verbs::wc_status::success; break;
      case IBV_WC_LOC_LEN_ERR: out.status = verbs::wc_status::local_length_error; break;
      case IBV_WC_LOC_PROT_ERR: out.status = verbs::wc_status::local_protection_error; break;
      case IBV_WC_REM_ACCESS_ERR: out.status = verbs::wc_status::remote_access_error; break;
      case IBV_WC_REM_OP_ERR: out.status = verbs::wc_status::remote_operation_error; break;
      case IBV_WC_RETRY_EXC_ERR: out.status = verbs::wc_status::retry_exceeded; break;
      case IBV_WC_RNR_RETRY_EXC_ERR: out.status = verbs::wc_status::rnr_retry_exceeded; break;
      case IBV_WC_WR_FLUSH_ERR: out.status = verbs::wc_status::flushed; break;
      default: out.status = verbs::wc_status::general_error; break;
    }
    switch (wc.opcode) {
      case IBV_WC_SEND: out.opcode = verbs::wc_opcode::send; break;
      case IBV_WC_RDMA_WRITE: out.opcode = verbs::wc_opcode::write; break;
      case IBV_WC_RECV_RDMA_WITH_IMM: out.opcode = verbs::wc_opcode::recv_with_imm; break;
      default: out.opcode = verbs::wc_opcode::recv; break;  // flushed receives report IBV_WC_RECV
    }
    return out;
  }
  static verbs::cm_event_type convert(rdma_cm_event_type t) {
    using T = verbs::cm_event_type;
    switch (t) {
      case RDMA_CM_EVENT_ADDR_RESOLVED: return T::addr_resolved;
      case RDMA_CM_EVENT_ADDR_ERROR: return T::addr_error;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: return T::route_resolved;
      case RDMA_CM_EVENT_ROUTE_ERROR: return T::route_error;
      case RDMA_CM_EVENT_CONNECT_REQUEST: return T::connect_request;
      case RDMA_CM_EVENT_CONNECT_RESPONSE: return T::connect_response;
      case RDMA_CM_EVENT_CONNECT_ERROR: return T::connect_error;
      case RDMA_CM_EVENT_UNREACHABLE: return T::unreachable;
      case RDMA_CM_EVENT_REJECTED: return T::rejected;
      case RDMA_CM_EVENT_ESTABLISHED: return T::established;
      case RDMA_CM_EVENT_DISCONNECTED: return T::disconnected;
      case RDMA_CM_EVENT_DEVICE_REMOVAL: return T::device_removal;
      case RDMA_CM_EVENT_MULTICAST_JOIN: return T::multicast_join;
      case RDMA_CM_EVENT_MULTICAST_ERROR: return T::multicast_error;
      case RDMA_CM_EVENT_ADDR_CHANGE: return T::addr_change;
      case RDMA_CM_EVENT_TIMEWAIT_EXIT: return T::timewait_exit;
      default: return T::other;
    }
  }
};

static_assert(bps::RdmaVerbs<rdma_core>);

}  // namespace bps::transport
