#pragma once
/// @file
/// `bps::transport::ipc_options<InnerOptions>` (`transport::ipc<Inner>::options`): whether the
/// shared-memory shortcut is on, and the options of the transport underneath. A decorator's
/// options hold its inner transport's, so a stack of decorators is configured by one value.

#include "byteps/core/config.hpp"

namespace bps::transport {

template <class InnerOptions>
struct ipc_options {
  /// Offer and accept shared-memory rings with peers on this host (BYTEPS_ENABLE_IPC). Off: the
  /// transport behaves exactly like the inner one.
  bool enabled = true;
  /// Each ring's size (BYTEPS_IPC_RING_BYTES), at least 4 of the job's largest frames. A push
  /// read in place holds its space until its round is summed, so the ring bounds how far a
  /// worker may run ahead of the others before its pushes under 128 KiB take TCP (larger ones
  /// go from their partitions' slots: ipc_partition_slots.hpp).
  std::size_t ring_bytes = std::size_t{16} << 20;
  InnerOptions inner{};

  /// The values the environment gave (`Config::enable_ipc`, `Config::ipc_ring_bytes`, and the
  /// inner transport's own).
  static ipc_options from(const Config& cfg) {
    return {.enabled = cfg.enable_ipc,
            .ring_bytes = cfg.ipc_ring_bytes,
            .inner = InnerOptions::from(cfg)};
  }
};

}  // namespace bps::transport
