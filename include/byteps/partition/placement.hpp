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

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"

namespace bps {

class server_placement {
 public:
  static constexpr int wheel_slots = 4096;

  /// The fraction of bytes the k CPU-only servers carry in mixed mode with n worker machines.
  static double mixed_cpu_fraction(int n, int k) {
    const double nn = n, kk = k;
    return 2 * kk * (nn - 1) / (nn * (nn + kk) - 2 * kk);
  }

  explicit server_placement(const Config& cfg)
      : servers_(cfg.num_servers), hash_(cfg.key_hash) {
    if (!cfg.mixed_mode) return;
    const int n = cfg.num_workers, k = cfg.num_servers - cfg.num_workers;
    if (k < 1)
      throw usage_error(fmt::format(
          "BYTEPS_ENABLE_MIXED_MODE needs more servers than worker machines (one colocated "
          "server per machine plus at least one CPU-only server): DMLC_NUM_SERVER={} and "
          "DMLC_NUM_WORKER={}",
          cfg.num_servers, cfg.num_workers));
    const double cpu = mixed_cpu_fraction(n, k);
    std::vector<double> weight(static_cast<std::size_t>(servers_));
    for (int s = 0; s < servers_; ++s)
      weight[static_cast<std::size_t>(s)] = s < n ? (1 - cpu) / n : cpu / k;
    // Smooth weighted round-robin: each slot goes to the server most behind its share.
    std::vector<double> credit(weight.size(), 0.0);
    wheel_.reserve(wheel_slots);
    for (int slot = 0; slot < wheel_slots; ++slot) {
      std::size_t best = 0;
      for (std::size_t s = 0; s < weight.size(); ++s) {
        credit[s] += weight[s];
        if (credit[s] > credit[best]) best = s;
      }
      credit[best] -= 1.0;
      wheel_.push_back(static_cast<int>(best));
    }
  }

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
