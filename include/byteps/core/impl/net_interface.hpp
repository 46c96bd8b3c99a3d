#pragma once
/// @file
/// The bodies of core/net_interface.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps {

std::string interface_address(std::string_view name, std::string_view variable) {
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
