#pragma once
/// @file
/// The bodies of compress/randomk.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::compress {

randomk::randomk(double k, std::uint64_t seed, bool unbiased)
    : sparse_compressor(k, "randomk"), seed_(seed), unbiased_(unbiased), rng_(seed, "randomk") {
  name_ =
      fmt::format("randomk(k={},seed={}{})", k_.text(), seed_, unbiased_ ? ",unbiased=true" : "");
}

std::size_t randomk::encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
  return encode_chosen(in, type, out, [this](std::span<const float> x, std::size_t k) {
    const std::size_t n = x.size();
    choose(n, k);
    const float scale = unbiased_ && k > 0 ? static_cast<float>(n) / static_cast<float>(k) : 1.0f;
    return std::pair{std::span<const std::uint32_t>(chosen_), scale};
  });
}

void randomk::choose(std::size_t n, std::size_t k) {
  taken_.assign(n, false);
  chosen_.clear();
  for (std::size_t j = n - k; j < n; ++j) {
    const auto t = static_cast<std::uint32_t>(rng_.below(j + 1));
    const auto pick = taken_[t] ? static_cast<std::uint32_t>(j) : t;
    taken_[pick] = true;
    chosen_.push_back(pick);
  }
  std::sort(chosen_.begin(), chosen_.end());
}

}  // namespace bps::compress
