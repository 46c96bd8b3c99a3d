#pragma once
/// @file
/// `topk`: the k elements of largest magnitude, as (index, value) pairs (BytePS's `topk`;
/// `compressor_k`, a count or a fraction of the partition's elements, see sparse.hpp).
///
/// Which k: by |x| descending, and among equal magnitudes the lower index first, so the choice
/// is exact and reproducible. Magnitudes are compared as fp32 bit patterns with the sign
/// cleared, which orders finite values and infinity as |x| does and puts NaN above infinity: a
/// NaN is sent rather than hidden.
///
/// Encoded format: the sparse stream of sparse.hpp, [u32 count][count x (u32 index, f32 value)]
/// little-endian, indices ascending, count = min(k, n); 4 + 8 * count bytes exactly.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "byteps/compress/byte_stream.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/compress/sparse.hpp"
#include "byteps/core/dtype.hpp"

namespace bps::compress {

class topk {
 public:
  /// `k`: a count (1, 2, ...) or a fraction (0 < k < 1) of each partition's elements.
  explicit topk(double k) : k_(k, "topk"), name_("topk(k=" + k_.text() + ")") {}

  std::string name() const { return name_; }
  double k() const noexcept { return k_.value(); }

  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const {
    return sparse_bytes(k_.of(float_elements(name_, bytes, type)));
  }

  std::size_t encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    const std::size_t n = float_elements(name_, in.size(), type);
    require_u32_indices(name_, n);
    const std::size_t k = k_.of(n);
    require_room(name_, out.size(), sparse_bytes(k));
    const auto x = read_floats(in, type, scratch_);
    const auto magnitude = [&](std::uint32_t i) {
      return std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffu;
    };
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), std::uint32_t{0});
    const auto before = [&](std::uint32_t a, std::uint32_t b) {
      const auto ma = magnitude(a), mb = magnitude(b);
      return ma != mb ? ma > mb : a < b;
    };
    std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(),
                     before);
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k));
    return write_sparse(out, std::span(order_).first(k), x);
  }

  void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    decode_as_floats(name_, out, type, scratch_,
                     [&](std::span<float> y) { read_sparse(name_, in, y); });
  }

 private:
  sparse_k k_;
  std::string name_;
  std::vector<float> scratch_;        // non-float32 or unaligned tensors only
  std::vector<std::uint32_t> order_;  // element indices, reused from round to round
};

}  // namespace bps::compress
