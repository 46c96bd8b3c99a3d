#pragma once
// References for the compressor unit tests (test_compress_*.cpp), from the definitions in the
// headers' comments, shared by the files that test each algorithm.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "compress_helpers.hpp"

namespace compress_test {

inline const std::vector<float> sample = {0.5f, -1.25f, 3.0f, -0.0f, 0.0f, 1e-8f, -7.5f, 2.0f, -0.75f};

// The reference top-k: stable sort by |x| descending keeps lower indices first among ties.
inline std::vector<pair> reference_topk(const std::vector<float>& x, std::size_t k) {
  std::vector<std::uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::fabs(x[a]) > std::fabs(x[b]);
  });
  order.resize(std::min(k, x.size()));
  std::sort(order.begin(), order.end());
  std::vector<pair> p;
  for (auto i : order) p.push_back({i, x[i]});
  return p;
}

// The reference random-k indices: Floyd's sampling over xorshift128+ draws, from their
// definitions.
inline std::vector<std::uint32_t> reference_randomk(xorshift_ref& g, std::size_t n, std::size_t k) {
  std::set<std::uint32_t> s;
  for (std::size_t j = n - k; j < n; ++j) {
    const auto t = static_cast<std::uint32_t>(g.next() % (j + 1));
    s.insert(s.count(t) ? static_cast<std::uint32_t>(j) : t);
  }
  return {s.begin(), s.end()};
}

// The reference dithering: the decoded values the header's definition gives, drawing from `g`
// as the compressor draws from its generator.
inline std::vector<float> reference_dithering(const std::vector<float>& x, unsigned s, bool natural,
                                       bool l2, xorshift_ref& g) {
  double norm = 0;
  for (float v : x) norm = l2 ? norm + double{v} * v : std::max(norm, double{std::fabs(v)});
  const float norm32 = static_cast<float>(l2 ? std::sqrt(norm) : norm);
  const double S = natural ? std::ldexp(1.0, static_cast<int>(s) - 1) : s;
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = static_cast<double>(g.next() >> 11) / 9007199254740992.0;
    if (norm32 == 0) continue;
    const double r = std::min(std::fabs(double{x[i]}) / norm32 * S, S);
    double lo = std::floor(r), hi = lo + 1;
    if (natural) {
      lo = r < 1 ? 0 : std::exp2(std::floor(std::log2(r)));
      hi = lo == 0 ? 1 : 2 * lo;
    }
    const double level = u < (r - lo) / (hi - lo) ? hi : lo;
    const auto v = static_cast<float>(level * norm32 / S);
    y[i] = x[i] < 0 ? -v : v;
  }
  return y;
}

inline bytes bits_from(const std::string& text) {
  bytes b((text.size() + 7) / 8);
  for (std::size_t i = 0; i < text.size(); ++i)
    if (text[i] == '1') b[i / 8] |= std::byte{0x80} >> (i % 8);
  return b;
}

}  // namespace compress_test
