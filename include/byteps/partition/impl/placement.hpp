#pragma once
/// @file
/// The bodies of partition/placement.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps {

server_placement::server_placement(const Config& cfg)
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

double server_placement::mixed_cpu_fraction(int n, int k) {
  const double nn = n, kk = k;
  return 2 * kk * (nn - 1) / (nn * (nn + kk) - 2 * kk);
}

}  // namespace bps
