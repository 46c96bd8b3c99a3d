#pragma once
/// @file
/// `bps::transport::rdma_options<VerbsOptions>` (`basic_rdma<V>::options`): the RDMA transport's
/// own knobs, as `tcp_options` are TCP's (transport.hpp says how options travel). Names and
/// meanings follow BytePS/ps-lite where they exist (BYTEPS_RDMA_RX_DEPTH,
/// BYTEPS_RDMA_START_DEPTH); docs/env.md lists the variables and their defaults.
///
/// Per link, the transport registers one slab: `rx_depth` receive slots and `start_depth` send
/// slots of `slot_bytes` each, and two staging areas of `staging_bytes` (one each way) for
/// payloads in memory nobody registered. So one link pins
/// `(rx_depth + start_depth) * slot_bytes + 2 * staging_bytes` bytes (`link_bytes()`).

#include <cstddef>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/transport/rdma/rdma_messages.hpp"

namespace bps::transport {

template <class VerbsOptions>
struct rdma_options {
  std::string device;        ///< BYTEPS_RDMA_DEVICE: "" = the first device with `port` active
  int port = 1;              ///< BYTEPS_RDMA_PORT: the device's port (1-based)
  int gid_index = -1;        ///< BYTEPS_RDMA_GID_INDEX: -1 = RoCE v2 when the port has one
  int rx_depth = 64;         ///< BYTEPS_RDMA_RX_DEPTH: receives posted per link (the peer's credits)
  int start_depth = 16;      ///< BYTEPS_RDMA_START_DEPTH: sends and writes in flight per link
  std::size_t slot_bytes = 4096;        ///< a frame whose header and payload fit goes in one SEND
  std::size_t staging_bytes = 256 << 10;  ///< BYTEPS_RDMA_STAGING_BYTES, per link and direction
  bool busy_poll = false;    ///< BYTEPS_RDMA_BUSY_POLL: never sleep (burns a core per transport)
  int poll_rounds = 64;      ///< empty polls before the completion thread arms and sleeps
  VerbsOptions verbs{};      ///< the verbs policy's own (an emulation's fabric, say)
  /// Where the links count how payloads travel (rdma_messages.hpp); null: the transport's own.
  /// Shared by the nodes given it, so a test or a monitor reads a whole cluster's counts.
  std::shared_ptr<rdma_msg::tally> tally;

  /// Bytes of registered memory one link needs.
  std::size_t link_bytes() const {
    return static_cast<std::size_t>(rx_depth + start_depth) * slot_bytes + 2 * staging_bytes;
  }

  /// The options the environment asked for: `Config::from_env()` read and range-checked the
  /// variables into `cfg.rdma`; this copies them. `verbs` keeps its default.
  static rdma_options from(const Config& cfg) {
    rdma_options o;
    o.device = cfg.rdma.device;
    o.port = cfg.rdma.port;
    o.gid_index = cfg.rdma.gid_index;
    o.rx_depth = cfg.rdma.rx_depth;
    o.start_depth = cfg.rdma.start_depth;
    o.staging_bytes = cfg.rdma.staging_bytes;
    o.busy_poll = cfg.rdma.busy_poll;
    return o;
  }

  /// Throws `usage_error` naming the field (options built in code skip Config::validate()).
  void validate() const {
    auto fail = [](std::string_view field, auto value, std::string_view expected) {
      throw usage_error(fmt::format(
          "transport::rdma::options: {} = {} is not valid: expected {}", field, value, expected));
    };
    // At least 4 receives: credits are returned in batches of rx_depth / 2 >= 2, which is what
    // keeps two credit-only messages from answering each other forever.
    if (rx_depth < 4 || rx_depth > 16384) fail("rx_depth (BYTEPS_RDMA_RX_DEPTH)", rx_depth, "4 .. 16384");
    if (start_depth < 2 || start_depth > 16384)
      fail("start_depth (BYTEPS_RDMA_START_DEPTH)", start_depth, "2 .. 16384");
    if (slot_bytes < 256 || slot_bytes > (1u << 20)) fail("slot_bytes", slot_bytes, "256 .. 1 MiB");
    if (staging_bytes < 4096 || staging_bytes > (1u << 30))
      fail("staging_bytes (BYTEPS_RDMA_STAGING_BYTES)", staging_bytes, "4 KiB .. 1 GiB");
    if (port < 1 || port > 255) fail("port (BYTEPS_RDMA_PORT)", port, "1 .. 255");
    if (gid_index < -1 || gid_index > 255) fail("gid_index (BYTEPS_RDMA_GID_INDEX)", gid_index, "-1 .. 255");
    if (poll_rounds < 1) fail("poll_rounds", poll_rounds, "at least 1");
  }
};

}  // namespace bps::transport
