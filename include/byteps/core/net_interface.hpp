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
#include "byteps/core/linkage.hpp"

namespace bps {

/// The first IPv4 address of interface `name`. Throws `usage_error` naming `variable` and the
/// value, and listing the interfaces that have an IPv4 address, when `name` has none or does not
/// exist; `communicator_error` when the system cannot list its interfaces.
BYTEPS_DECL std::string interface_address(std::string_view name,
                                          std::string_view variable = "DMLC_INTERFACE");

}  // namespace bps

#if BYTEPS_INCLUDE_BODIES
#include "byteps/core/impl/net_interface.hpp"
#endif
