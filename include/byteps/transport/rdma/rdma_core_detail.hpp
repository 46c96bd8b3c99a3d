#pragma once
/// @file
/// What `bps::transport::rdma_core` (rdma_core.hpp) needs around the verbs and rdma_cm calls:
/// errno as a `communicator_error` naming the call, address resolution and text, the connection
/// parameters, the port's description, and the conversions from rdma-core's completion and
/// event types to the policy's (verbs.hpp).

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
#include "byteps/transport/rdma/verbs.hpp"

namespace bps::transport::rdma_core_detail {

[[noreturn]] inline void fail(std::string_view call, std::string_view what, int e = errno) {
  throw communicator_error(fmt::format("rdma: {} ({}) failed: {}", call, what, std::strerror(e)));
}
inline void nonblocking(int fd, std::string_view call) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) fail(call, "O_NONBLOCK");
}
inline sockaddr_storage resolve(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const auto service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0 || !res)
    throw communicator_error(fmt::format("rdma: cannot resolve '{}': {}", host, gai_strerror(rc)));
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return out;
}
inline std::string address_text(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a && a->sa_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof text);
  else if (a && a->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, text, sizeof text);
  return text;
}
inline rdma_conn_param conn_param(std::span<const std::byte> data) {
  rdma_conn_param p{};
  p.private_data = data.data();
  p.private_data_len = static_cast<std::uint8_t>(data.size());
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 0;  // credits guarantee a posted receive; see the file comment
  return p;
}
inline verbs::port_info query_port(ibv_context* ctx, int port, int gid_index) {
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
inline verbs::work_completion convert(const ibv_wc& wc) {
  verbs::work_completion out;
  out.wr_id = wc.wr_id;
  out.byte_len = wc.byte_len;
  out.imm = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0;
  switch (wc.status) {
    case IBV_WC_SUCCESS:
      out.status = verbs::wc_status::success;
      break;
    case IBV_WC_LOC_LEN_ERR:
      out.status = verbs::wc_status::local_length_error;
      break;
    case IBV_WC_LOC_PROT_ERR:
      out.status = verbs::wc_status::local_protection_error;
      break;
    case IBV_WC_REM_ACCESS_ERR:
      out.status = verbs::wc_status::remote_access_error;
      break;
    case IBV_WC_REM_OP_ERR:
      out.status = verbs::wc_status::remote_operation_error;
      break;
    case IBV_WC_RETRY_EXC_ERR:
      out.status = verbs::wc_status::retry_exceeded;
      break;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      out.status = verbs::wc_status::rnr_retry_exceeded;
      break;
    case IBV_WC_WR_FLUSH_ERR:
      out.status = verbs::wc_status::flushed;
      break;
    default:
      out.status = verbs::wc_status::general_error;
      break;
  }
  switch (wc.opcode) {
    case IBV_WC_SEND:
      out.opcode = verbs::wc_opcode::send;
      break;
    case IBV_WC_RDMA_WRITE:
      out.opcode = verbs::wc_opcode::write;
      break;
    case IBV_WC_RECV_RDMA_WITH_IMM:
      out.opcode = verbs::wc_opcode::recv_with_imm;
      break;
    default:
      out.opcode = verbs::wc_opcode::recv;
      break;  // flushed receives report IBV_WC_RECV
  }
  return out;
}
inline verbs::cm_event_type convert(rdma_cm_event_type t) {
  using T = verbs::cm_event_type;
  switch (t) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return T::addr_resolved;
    case RDMA_CM_EVENT_ADDR_ERROR:
      return T::addr_error;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return T::route_resolved;
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return T::route_error;
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return T::connect_request;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return T::connect_response;
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return T::connect_error;
    case RDMA_CM_EVENT_UNREACHABLE:
      return T::unreachable;
    case RDMA_CM_EVENT_REJECTED:
      return T::rejected;
    case RDMA_CM_EVENT_ESTABLISHED:
      return T::established;
    case RDMA_CM_EVENT_DISCONNECTED:
      return T::disconnected;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return T::device_removal;
    case RDMA_CM_EVENT_MULTICAST_JOIN:
      return T::multicast_join;
    case RDMA_CM_EVENT_MULTICAST_ERROR:
      return T::multicast_error;
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return T::addr_change;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return T::timewait_exit;
    default:
      return T::other;
  }
}

}  // namespace bps::transport::rdma_core_detail
