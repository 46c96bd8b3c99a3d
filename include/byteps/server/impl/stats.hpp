#pragma once
/// @file
/// The bodies of server/stats.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::server {

std::string report_line(const throughput::interval& i, const std::vector<worker_lag>& lag) {
  const double s = i.seconds > 0 ? i.seconds : 1.0;
  std::string line =
      fmt::format("last {:.3f} s: {} round{}, in {:.3f} MB/s, out {:.3f} MB/s", i.seconds, i.rounds,
                  i.rounds == 1 ? "" : "s", static_cast<double>(i.bytes_in) / s / 1e6,
                  static_cast<double>(i.bytes_out) / s / 1e6);
  std::vector<int> behind;
  for (std::size_t w = 0; w < lag.size(); ++w)
    if (lag[w].partitions > 0) behind.push_back(static_cast<int>(w));
  if (behind.empty()) return line + "; no worker behind";
  std::stable_sort(behind.begin(), behind.end(), [&](int a, int b) {
    return lag[static_cast<std::size_t>(a)].oldest > lag[static_cast<std::size_t>(b)].oldest;
  });
  constexpr std::size_t shown = 8;
  line += "; behind:";
  for (std::size_t n = 0; n < behind.size() && n < shown; ++n) {
    const auto& l = lag[static_cast<std::size_t>(behind[n])];
    line += fmt::format("{} worker {} {:.1f} s on {} partition{}", n == 0 ? "" : ",", behind[n],
                        std::chrono::duration<double>(l.oldest).count(), l.partitions,
                        l.partitions == 1 ? "" : "s");
  }
  if (behind.size() > shown) line += fmt::format(", {} more", behind.size() - shown);
  return line;
}

}  // namespace bps::server
