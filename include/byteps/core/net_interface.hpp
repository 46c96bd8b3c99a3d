#pragma once
/// @file
/// `bps::interface_address(name)`: the IPv4 address of a network interface, for
/// `DMLC_INTERFACE` as ps-lite users know it (`ib0`, `eth2`): a server with no `DMLC_NODE_HOST`
/// listens on that interface's address and tells the workers it. Over RDMA the address also
/// picks the device, since rdma_cm binds to the device that owns it.

#include <arpa/inet.h>
#include <fmt/core.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "byteps/core/error.hpp"

namespace bps {

/// The first IPv4 address of interface `name`. Throws `usage_error` naming `variable` and the
/// value, and listing the interfaces that have an IPv4 address, when `name` has none or does not
/// exist; `communicator_error` when the system cannot list its interfaces.
inline std::string interface_address(std::string_view name,
                                     std::string_view variable = "DMLC_INTERFACE") {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    throw communicator_error(
        fmt::format("{}='{}': getifaddrs failed: {}", variable, name, std::strerror(errno)));
  std::string found;
  std::string with_ipv4;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const std::string_view iface = i->ifa_name;
    if (iface == name && found.empty()) {
      char text[INET_ADDRSTRLEN] = {};
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      if (::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text) != nullptr) found = text;
    }
    with_ipv4 += fmt::format("{}{}", with_ipv4.empty() ? "" : ", ", iface);
  }
  ::freeifaddrs(list);
  if (found.empty())
    throw usage_error(fmt::format(
        "{}='{}' is not valid: expected a network interface with an IPv4 address (here: {})",
        variable, name, with_ipv4.empty() ? "none" : with_ipv4));
  return found;
}

}  // namespace bps
