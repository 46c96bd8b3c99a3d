#pragma once
/// @file
/// Whether every node of a job runs on one host, judged by the scheduler from the addresses it
/// sees its nodes' connections come from. With every node moving payloads through shared
/// memory, the welcome says so (`welcome::in_shared_memory`), and every worker's partitioner
/// can cut tensors for a job whose payloads never cross a socket (`partition::by_bytes`). Nodes
/// behind one NAT address would look like one host: that costs speed, never a wrong sum, since
/// every worker hears the same answer.

#include <span>
#include <string>
#include <string_view>

namespace bps::rendezvous {

/// The host part of a link's peer text: "10.0.0.2:41000" -> "10.0.0.2", "::1:41000" -> "::1",
/// "[::1]:41000" -> "::1", an IPv4 address mapped into IPv6 as its IPv4 form. Empty when the
/// text holds no port (a transport's "unknown peer").
inline std::string host_of_peer(std::string_view peer) {
  const auto colon = peer.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return {};
  std::string_view host = peer.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  constexpr std::string_view mapped = "::ffff:";
  if (host.starts_with(mapped) && host.find('.') != std::string_view::npos)
    host.remove_prefix(mapped.size());
  return std::string(host);
}

/// True when every peer's host is the same one: loopback addresses (127.0.0.0/8, ::1) all
/// count as this host. False for no peers, or for any peer whose host is unknown.
inline bool all_on_one_host(std::span<const std::string> peers) {
  auto canonical = [](std::string host) {
    return host.starts_with("127.") || host == "::1" ? std::string("loopback") : host;
  };
  std::string first;
  for (const auto& peer : peers) {
    const std::string host = host_of_peer(peer);
    if (host.empty()) return false;
    if (first.empty())
      first = canonical(host);
    else if (canonical(host) != first)
      return false;
  }
  return !first.empty();
}

}  // namespace bps::rendezvous
