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
#include <utility>
#include <vector>

#include "byteps/compress/byte_stream.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/compress/sparse.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::compress {

class topk : public sparse_compressor {
 public:
  /// `k`: a count (1, 2, ...) or a fraction (0 < k < 1) of each partition's elements.
  explicit topk(double k) : sparse_compressor(k, "topk") { name_ = "topk(k=" + k_.text() + ")"; }

  BYTEPS_DECL std::size_t encode(std::span<const std::byte> in, dtype type,
                                 std::span<std::byte> out);

 private:
  std::vector<std::uint32_t> order_;  // element indices, reused from round to round
};

}  // namespace bps::compress

#if BYTEPS_INCLUDE_BODIES
#include "byteps/compress/impl/topk.hpp"
#endif
