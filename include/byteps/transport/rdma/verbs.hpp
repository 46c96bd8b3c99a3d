#pragma once
/// @file
/// The `bps::RdmaVerbs` concept: the few verbs and rdma_cm calls that `transport::basic_rdma`
/// makes, behind one thin policy, so that the same transport code runs against rdma-core
/// (`transport::rdma_core`, rdma_core.hpp) or against the in-process emulation the tests use
/// (tests/rdma/emulated_verbs.hpp). Each member is named after the call it stands for and keeps
/// its semantics; what a backend must do beyond the bare call is said at the member.
///
/// Handles are pointers to the policy's own opaque types (`V::device`, `V::cm_id`, ...), made
/// and destroyed through the policy, as in verbs. The values that cross the policy (work
/// requests, completions, connection-manager events) are the plain structs below, the same for
/// every backend, so the transport never sees an `ibv_*` type.
///
/// Errors: a call that fails throws `bps::communicator_error` naming the call and the reason
/// (errno text), never aborts. An emulation may in addition throw its own exception when the
/// caller breaks a verbs rule (a post past the queue depth, a write outside a region): that is a
/// bug in the transport, and the emulation's point is to make it loud.
///
/// Threading: as in verbs, posting to one queue pair from several threads is allowed;
/// `basic_rdma` still serialises its posts per link. Polling a completion queue, reading the
/// channels and the connection-manager calls happen on the transport's one progress thread.

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bps::transport::verbs {

/// `ibv_access_flags` that matter here (the values are ours; backends map them one to one and
/// add nothing). Local reads (the source of a SEND or WRITE) need no flag; `remote_write`
/// needs `local_write` with it (ibv_reg_mr fails with EINVAL otherwise).
enum access : unsigned {
  local_write = 1,   ///< IBV_ACCESS_LOCAL_WRITE: receives may land here
  remote_write = 2,  ///< IBV_ACCESS_REMOTE_WRITE: a peer's RDMA WRITE may land here
  remote_read = 4,   ///< IBV_ACCESS_REMOTE_READ: a peer may read it (nothing here asks for it)
};

/// One scatter/gather element (`ibv_sge`).
struct sge {
  std::byte* addr = nullptr;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

enum class send_opcode { send, write_with_imm };  ///< IBV_WR_SEND, IBV_WR_RDMA_WRITE_WITH_IMM

/// A signaled send work request (`ibv_send_wr` with one sge): SEND, or WRITE WITH IMMEDIATE to
/// (`remote_addr`, `rkey`) in the peer's registered memory.
struct send_wr {
  std::uint64_t wr_id = 0;
  send_opcode opcode = send_opcode::send;
  sge local;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t imm = 0;  ///< host order; backends convert to and from network order
};

/// A receive work request (`ibv_recv_wr` with one sge).
struct recv_wr {
  std::uint64_t wr_id = 0;
  sge local;
};

/// `ibv_wc_status`, the ones a transport tells apart; the rest are `general_error`.
enum class wc_status {
  success,
  local_length_error,      ///< a SEND larger than the receive buffer
  local_protection_error,  ///< an sge outside its lkey's region
  remote_access_error,     ///< a WRITE outside the rkey's region or without remote_write
  remote_operation_error,
  retry_exceeded,          ///< the peer stopped answering (IBV_WC_RETRY_EXC_ERR)
  rnr_retry_exceeded,      ///< receiver not ready: no receive posted (IBV_WC_RNR_RETRY_EXC_ERR)
  flushed,                 ///< the queue pair is in the error state (IBV_WC_WR_FLUSH_ERR)
  general_error,
};

enum class wc_opcode { send, write, recv, recv_with_imm };

/// One work completion (`ibv_wc`). For a receive, `byte_len` is the bytes that arrived (for
/// `recv_with_imm`, the bytes the WRITE placed) and `imm` the immediate.
struct work_completion {
  std::uint64_t wr_id = 0;
  wc_status status = wc_status::success;
  wc_opcode opcode = wc_opcode::send;
  std::uint32_t byte_len = 0;
  std::uint32_t imm = 0;
};

constexpr std::string_view status_name(wc_status s) noexcept {
  switch (s) {
    case wc_status::success: return "success";
    case wc_status::local_length_error: return "local length error";
    case wc_status::local_protection_error: return "local protection error";
    case wc_status::remote_access_error: return "remote access error";
    case wc_status::remote_operation_error: return "remote operation error";
    case wc_status::retry_exceeded: return "transport retry counter exceeded";
    case wc_status::rnr_retry_exceeded: return "receiver not ready retry counter exceeded";
    case wc_status::flushed: return "work request flushed (queue pair in error state)";
    case wc_status::general_error: return "general error";
  }
  return "unknown status";
}

/// `rdma_cm_event_type`: every event the connection manager can report. The transport handles
/// each one (an unknown one from a newer rdma-core arrives as `other` and fails its connection).
enum class cm_event_type {
  addr_resolved,
  addr_error,
  route_resolved,
  route_error,
  connect_request,
  connect_response,
  connect_error,
  unreachable,
  rejected,
  established,
  disconnected,
  device_removal,
  multicast_join,
  multicast_error,
  addr_change,
  timewait_exit,
  other,
};

constexpr std::string_view event_name(cm_event_type t) noexcept {
  switch (t) {
    case cm_event_type::addr_resolved: return "ADDR_RESOLVED";
    case cm_event_type::addr_error: return "ADDR_ERROR";
    case cm_event_type::route_resolved: return "ROUTE_RESOLVED";
    case cm_event_type::route_error: return "ROUTE_ERROR";
    case cm_event_type::connect_request: return "CONNECT_REQUEST";
    case cm_event_type::connect_response: return "CONNECT_RESPONSE";
    case cm_event_type::connect_error: return "CONNECT_ERROR";
    case cm_event_type::unreachable: return "UNREACHABLE";
    case cm_event_type::rejected: return "REJECTED";
    case cm_event_type::established: return "ESTABLISHED";
    case cm_event_type::disconnected: return "DISCONNECTED";
    case cm_event_type::device_removal: return "DEVICE_REMOVAL";
    case cm_event_type::multicast_join: return "MULTICAST_JOIN";
    case cm_event_type::multicast_error: return "MULTICAST_ERROR";
    case cm_event_type::addr_change: return "ADDR_CHANGE";
    case cm_event_type::timewait_exit: return "TIMEWAIT_EXIT";
    case cm_event_type::other: return "unknown event";
  }
  return "unknown event";
}

/// One connection-manager event, copied out of `rdma_cm_event` and already acknowledged, so the
/// transport may destroy the id it names whenever it likes. For `connect_request`, `id` is the
/// new id of the request and `listen_id` the listener's.
template <class Id>
struct cm_event {
  cm_event_type type = cm_event_type::other;
  Id* id = nullptr;
  Id* listen_id = nullptr;
  int status = 0;                      ///< the event's status (a reject reason, an errno)
  std::vector<std::byte> private_data; ///< connect_request, established, rejected
};

/// Queue-pair sizes (`ibv_qp_init_attr::cap`, one sge each way).
struct qp_caps {
  std::uint32_t send_depth = 0;
  std::uint32_t recv_depth = 0;
};

/// What `open_device` found: the device and the port as `ibv_query_port` and the GID table
/// showed them.
struct port_info {
  std::string device;       ///< "mlx5_0"
  int port = 1;
  std::uint32_t mtu_bytes = 0;  ///< the port's active MTU
  bool ethernet = false;        ///< RoCE (link layer Ethernet) rather than InfiniBand
  int gid_index = 0;            ///< the GID used: RoCE v2 preferred when not chosen
  bool roce_v2 = false;
};

}  // namespace bps::transport::verbs

namespace bps {

/// A verbs policy `V`. See the file comment for errors and threading; each call says which
/// verbs or rdma_cm call it is.
template <class V>
concept RdmaVerbs =
    std::copy_constructible<typename V::options> &&
    std::constructible_from<V, const typename V::options&> &&
    requires(V& v, typename V::device* dev, typename V::mr* mr, typename V::comp_channel* cc,
             typename V::cq* cq, typename V::event_channel* ch, typename V::cm_id* id,
             std::span<std::byte> memory, std::span<const std::byte> private_data,
             std::span<transport::verbs::work_completion> wcs,
             const transport::verbs::send_wr& swr, const transport::verbs::recv_wr& rwr,
             const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout,
             unsigned access, transport::verbs::qp_caps caps, int depth, void* context) {
      { V::name } -> std::convertible_to<std::string_view>;
      // ibv_get_device_list: the names of the devices present (empty: no RDMA device).
      { v.device_names() } -> std::same_as<std::vector<std::string>>;
      // getrlimit(RLIMIT_MEMLOCK): bytes that may be pinned; nullopt when unlimited.
      { v.memlock_limit() } -> std::same_as<std::optional<std::size_t>>;
      // Opens device `name` ("" = the first with port `port` active), allocates its protection
      // domain (ibv_alloc_pd) and queries the port; gid_index < 0 picks RoCE v2 when present.
      { v.open_device(std::string_view{}, int{}, int{}) } -> std::same_as<typename V::device*>;
      { v.port(dev) } -> std::same_as<transport::verbs::port_info>;
      v.close_device(dev);
      // ibv_reg_mr on the device's protection domain, with exactly `access`; ibv_dereg_mr,
      // only once no posted work request uses the region any more.
      { v.reg_mr(dev, memory, access) } -> std::same_as<typename V::mr*>;
      { v.lkey(mr) } -> std::same_as<std::uint32_t>;
      { v.rkey(mr) } -> std::same_as<std::uint32_t>;
      v.dereg_mr(mr);
      // ibv_create_comp_channel; its file descriptor is non-blocking.
      { v.create_comp_channel(dev) } -> std::same_as<typename V::comp_channel*>;
      { v.fd(cc) } -> std::same_as<int>;
      v.destroy_comp_channel(cc);
      // ibv_create_cq with `depth` entries on the channel; ibv_destroy_cq.
      { v.create_cq(dev, cc, depth) } -> std::same_as<typename V::cq*>;
      v.destroy_cq(cq);
      v.req_notify_cq(cq);  // arm: the next completion raises one channel event
      // ibv_get_cq_event + ibv_ack_cq_events: the queue of one pending event, or nullptr.
      { v.get_cq_event(cc) } -> std::same_as<typename V::cq*>;
      { v.poll_cq(cq, wcs) } -> std::same_as<int>;  // ibv_poll_cq into wcs; the number filled
      // rdma_create_event_channel (non-blocking fd), rdma_destroy_event_channel.
      { v.create_event_channel() } -> std::same_as<typename V::event_channel*>;
      { v.fd(ch) } -> std::same_as<int>;
      v.destroy_event_channel(ch);
      // rdma_create_id (RDMA_PS_TCP) with a user context, rdma_destroy_id.
      { v.create_id(ch, context) } -> std::same_as<typename V::cm_id*>;
      { v.context(id) } -> std::same_as<void*>;
      v.set_context(id, context);
      v.destroy_id(id);
      // rdma_bind_addr + rdma_listen; the bound port (port 0 picks one).
      { v.listen(id, host, port) } -> std::same_as<std::uint16_t>;
      v.resolve_addr(id, host, port, timeout);  // rdma_resolve_addr; ADDR_RESOLVED follows
      v.resolve_route(id, timeout);             // rdma_resolve_route; ROUTE_RESOLVED follows
      // rdma_create_qp: an RC queue pair on the device's protection domain, both queues on cq.
      // Throws when the id resolved to another device than `dev`.
      v.create_qp(id, dev, cq, caps);
      v.destroy_qp(id);
      v.connect(id, private_data);  // rdma_connect
      v.accept(id, private_data);   // rdma_accept
      v.reject(id, private_data);   // rdma_reject
      v.disconnect(id);             // rdma_disconnect: the queue pair goes to the error state
      // rdma_get_cm_event + copy + rdma_ack_cm_event; nullopt when none is pending.
      { v.get_cm_event(ch) } -> std::same_as<std::optional<transport::verbs::cm_event<typename V::cm_id>>>;
      v.post_send(id, swr);  // ibv_post_send on the id's queue pair
      v.post_recv(id, rwr);  // ibv_post_recv
      { v.peer_address(id) } -> std::convertible_to<std::string>;   // "host:port"
      { v.local_host(id) } -> std::convertible_to<std::string>;     // "host"
    };

}  // namespace bps
