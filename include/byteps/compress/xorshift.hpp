#pragma once
/// @file
/// xorshift128+, the generator BytePS's compressors use, seeded as BytePS seeds it (both state
/// words = the seed). Deterministic and the same on every platform, so nodes given the same
/// seed draw the same numbers: randomk's workers and servers pick the same indices each round.

#include <fmt/core.h>

#include <cstdint>
#include <string_view>

#include "byteps/core/error.hpp"

namespace bps::compress {

class xorshift128p {
 public:
  /// `compressor` names the user of the generator in the error for seed 0 (an all-zero state
  /// would only ever yield 0).
  xorshift128p(std::uint64_t seed, std::string_view compressor) : a_(seed), b_(seed) {
    if (seed == 0)
      throw usage_error(fmt::format("compressor '{}': seed must not be 0", compressor));
  }

  std::uint64_t next() noexcept {
    std::uint64_t t = a_;
    const std::uint64_t s = b_;
    a_ = s;
    t ^= t << 23;
    t ^= t >> 17;
    t ^= s ^ (s >> 26);
    b_ = t;
    return t + s;
  }

  /// Uniform-ish in [0, bound) as BytePS draws it (next() % bound); bound > 0.
  std::uint64_t below(std::uint64_t bound) noexcept { return next() % bound; }

  /// Uniform in [0, 1): the top 53 bits of a draw.
  double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1p-53; }

 private:
  std::uint64_t a_, b_;
};

}  // namespace bps::compress
