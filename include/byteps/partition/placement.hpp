#pragma once
/// @file
/// `bps::server_placement`: which server owns each partition.
///
/// By default every server gets an equal share: a tensor's partitions start at the server its
/// key hashes to and go round the servers in turn (`bps::server_for`).
///
/// Mixed mode (`BYTEPS_ENABLE_MIXED_MODE=1`, BytePS's name): the job has n worker machines, each
/// running a colocated server (server ranks 0 .. n-1; start them with BYTEPS_SERVER_ID), and k
/// CPU-only machines running servers (ranks n .. n+k-1). A colocated server shares its NIC with
/// a worker, so it should carry less: the OSDI'20 optimum sends a fraction
/// `2k(n-1) / (n(n+k) - 2k)` of the bytes to the k CPU servers and the rest to the colocated
/// ones (`mixed_cpu_fraction`). Partitions go round a wheel of `wheel_slots` slots in which each
/// server holds slots in proportion to its share, laid out by smooth weighted round-robin so a
/// tensor's consecutive partitions still spread over every server.

#include <fmt/core.h>

#include <cstdint>
#include <string>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/linkage.hpp"

namespace bps {

class server_placement {
 public:
  static constexpr int wheel_slots = 4096;

  /// The fraction of bytes the k CPU-only servers carry in mixed mode with n worker machines.
  BYTEPS_DECL static double mixed_cpu_fraction(int n, int k);

  BYTEPS_DECL explicit server_placement(const Config& cfg);

  int server_for(std::uint64_t tensor, std::uint32_t part) const {
    if (wheel_.empty()) return bps::server_for(tensor, part, servers_, hash_);
    const auto slots = static_cast<std::uint64_t>(wheel_.size());
    return wheel_[static_cast<std::size_t>((key_hash(tensor, hash_) % slots + part) % slots)];
  }

  bool mixed() const noexcept { return !wheel_.empty(); }

 private:
  int servers_;
  key_hash_fn hash_;
  std::vector<int> wheel_;  // empty: equal shares
};

}  // namespace bps

#if BYTEPS_INCLUDE_BODIES
#include "byteps/partition/impl/placement.hpp"
#endif
