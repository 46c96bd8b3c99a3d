#pragma once
/// @file
/// The (index, value) stream that `topk` and `randomk` share, their `k`, and what else they
/// share: `sparse_compressor`, all of a sparse compressor but the choice of indices.
///
/// Encoded format, little-endian:
///   [u32 count][count x (u32 index, f32 value)]
/// with indices strictly ascending and below the tensor's element count; 4 + 8 * count bytes.
/// Decoding zeroes the tensor and writes the values at their indices. A stream of another size,
/// an index out of range, or indices out of order (which is also how a repeated index shows)
/// is refused.

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "byteps/compress/byte_stream.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::compress {

/// How many elements a sparse compressor sends: BytePS's `compressor_k`, a fraction of the
/// partition's elements when below 1, else a count. Checked on construction.
class sparse_k {
 public:
  sparse_k(double k, std::string_view compressor) : k_(k) {
    const bool fraction = k > 0 && k < 1;
    const bool count =
        k >= 1 && k <= std::numeric_limits<std::uint32_t>::max() && k == std::floor(k);
    if (!fraction && !count)
      throw usage_error(fmt::format(
          "compressor '{}': k = {} is neither a fraction of the elements (0 < k < 1) nor a whole "
          "count (1, 2, ...)",
          compressor, k));
  }

  /// The count for a partition of `n` elements: floor(k * n) but at least 1 for a fraction
  /// (as BytePS), and never more than n.
  std::size_t of(std::size_t n) const noexcept {
    std::size_t k = k_ < 1 ? static_cast<std::size_t>(k_ * static_cast<double>(n))
                           : static_cast<std::size_t>(k_);
    if (k == 0) k = 1;
    return k < n ? k : n;
  }

  double value() const noexcept { return k_; }
  std::string text() const { return fmt::format("{}", k_); }

 private:
  double k_;
};

/// Throws unless every index of an `n`-element partition fits the stream's u32.
BYTEPS_DECL void require_u32_indices(std::string_view compressor, std::size_t n);

inline std::size_t sparse_bytes(std::size_t count) noexcept {
  return 4 + 8 * count;
}

/// Writes the pairs (indices[i], x[indices[i]] * scale); `indices` ascending.
BYTEPS_DECL std::size_t write_sparse(std::span<std::byte> out,
                                     std::span<const std::uint32_t> indices,
                                     std::span<const float> x, float scale = 1.0f) noexcept;

/// Decodes a sparse stream into `y` (all of it: zeros where no pair is), validating it.
BYTEPS_DECL void read_sparse(std::string_view compressor, std::span<const std::byte> in,
                             std::span<float> y);

/// A compressor that sends k (index, value) pairs: k, the name, the bound, the decode, and an
/// encode around the one thing topk and randomk do differently, which indices to send.
class sparse_compressor {
 public:
  std::string name() const { return name_; }
  double k() const noexcept { return k_.value(); }

  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const {
    return sparse_bytes(k_.of(float_elements(name_, bytes, type)));
  }

  void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    decode_as_floats(name_, out, type, scratch_,
                     [&](std::span<float> y) { read_sparse(name_, in, y); });
  }

 protected:
  /// `compressor`: the name in messages about `k`; the derived class then sets `name_`.
  sparse_compressor(double k, std::string_view compressor) : k_(k, compressor), name_(compressor) {}

  /// Encodes `in` as the pairs `choose(x, k)` picks, x being the elements as fp32 and k how
  /// many to send: it returns their indices, ascending, and the factor the values are sent with.
  template <class Choose>
  std::size_t encode_chosen(std::span<const std::byte> in, dtype type, std::span<std::byte> out,
                            Choose&& choose) {
    const std::size_t n = float_elements(name_, in.size(), type);
    require_u32_indices(name_, n);
    const std::size_t k = k_.of(n);
    require_room(name_, out.size(), sparse_bytes(k));
    const auto x = read_floats(in, type, scratch_);
    const std::pair<std::span<const std::uint32_t>, float> chosen = choose(x, k);
    return write_sparse(out, chosen.first, x, chosen.second);
  }

  sparse_k k_;
  std::string name_;

 private:
  std::vector<float> scratch_;  // non-float32 or unaligned tensors only
};

}  // namespace bps::compress

#if BYTEPS_INCLUDE_BODIES
#include "byteps/compress/impl/sparse.hpp"
#endif
