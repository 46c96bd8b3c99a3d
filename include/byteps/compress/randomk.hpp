#pragma once
/// @file
/// `randomk`: k elements chosen at random, as (index, value) pairs (BytePS's `randomk`;
/// `compressor_k`, a count or a fraction of the partition's elements, see sparse.hpp; `seed`).
///
/// The generator is xorshift128+ (xorshift.hpp), seeded with `seed` on every node, and each
/// encode draws the next k distinct indices from it (Robert Floyd's sampling: for j from n - k
/// to n - 1, draw t in [0, j]; take t, or j if t is taken). Workers and the servers that
/// re-encode the sum encode once per round each, so with the same seed they pick the same
/// indices in the same round, and the server's re-encoding keeps every value the workers sent.
///
/// `unbiased` multiplies the values sent by n / k, so that the expected decoded tensor is the
/// input (BytePS does this when there is no error feedback). Only workers should: a server
/// re-encoding a sum of scaled values must not scale again (registry.hpp's `for_server`).
///
/// Encoded format: the sparse stream of sparse.hpp, [u32 count][count x (u32 index, f32 value)]
/// little-endian, indices ascending, count = min(k, n); 4 + 8 * count bytes exactly.

#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/compress/byte_stream.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/compress/sparse.hpp"
#include "byteps/compress/xorshift.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::compress {

class randomk : public sparse_compressor {
 public:
  /// BytePS's sparse error feedback seeds its generator with this when given none.
  static constexpr std::uint64_t default_seed = 2020;

  /// `k`: a count (1, 2, ...) or a fraction (0 < k < 1) of each partition's elements; `seed`:
  /// not 0, the same on every node.
  BYTEPS_DECL explicit randomk(double k, std::uint64_t seed = default_seed, bool unbiased = false);

  std::uint64_t seed() const noexcept { return seed_; }
  bool unbiased() const noexcept { return unbiased_; }

  BYTEPS_DECL std::size_t encode(std::span<const std::byte> in, dtype type,
                                 std::span<std::byte> out);

 private:
  // Floyd's algorithm: exactly k draws, k distinct indices, each k-subset equally likely (up
  // to the modulo's bias, as in BytePS).
  BYTEPS_DECL void choose(std::size_t n, std::size_t k);

  std::uint64_t seed_;
  bool unbiased_;
  xorshift128p rng_;
  std::vector<bool> taken_;
  std::vector<std::uint32_t> chosen_;
};

}  // namespace bps::compress

#if BYTEPS_INCLUDE_BODIES
#include "byteps/compress/impl/randomk.hpp"
#endif
