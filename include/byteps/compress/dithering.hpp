#pragma once
/// @file
/// `dithering`: stochastic quantisation to s levels (BytePS's `dithering`, after QSGD and
/// natural compression), sent as an Elias-delta stream of the nonzero levels.
///
/// Parameters (BytePS's names in brackets): `s` [`compressor_k`], the number of levels above
/// zero; `partition` [`dithering_partition`], `linear` (levels 0, 1, ..., s, spaced evenly) or
/// `natural` (levels 0, 1, 2, 4, ..., 2^(s-1), so S = 2^(s-1), s <= 31); `normalize`
/// [`dithering_normalize`], `max` (norm = max |x|) or `l2` (norm = sqrt of the sum of x^2,
/// summed in double); `seed` of the rounding's generator (xorshift.hpp; need not agree
/// across nodes).
///
/// Quantising, with S = s (linear) or 2^(s-1) (natural): r = |x| / norm * S in double, clamped
/// to [0, S]; the levels below and above r are `lo` and `hi` (linear: floor(r) and floor(r) + 1;
/// natural: 0 and 1 under 1, else the power of two p <= r and 2p); the level is `hi` with
/// probability (r - lo) / (hi - lo), else `lo`, by u < (r - lo) / (hi - lo) for u the next
/// `unit()` draw. One draw per element in order, zeros included, so a round uses n draws.
/// A decoded element is +-fl32(level * norm / S), computed in double. An infinite or NaN norm
/// (an inf or NaN in the input, or an l2 norm past fp32's range) is a `usage_error`: there are
/// no levels to round it to.
///
/// Encoded format, little-endian:
///   [f32 norm][u32 bits][ceil(bits / 8) bytes of bit stream, most significant bit first,
///   padding bits 0]
/// The bit stream (bitstream.hpp) holds, for each element i with a nonzero level, ascending:
/// Elias delta of the gap i - previous (the previous of the first is -1, so its gap is i + 1),
/// the sign bit (1 = negative), Elias delta of the level. Decode refuses a size other than
/// 8 + ceil(bits / 8), set padding bits, an index past the tensor, a level above S, and a stream
/// that ends inside an entry.

#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "byteps/compress/bitstream.hpp"
#include "byteps/compress/byte_stream.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/compress/xorshift.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::compress {

class dithering {
 public:
  enum class partition { linear, natural };
  enum class normalize { max, l2 };
  static constexpr std::uint64_t default_seed = 2020;

  BYTEPS_DECL explicit dithering(unsigned s, partition p = partition::linear,
                                 normalize norm = normalize::max,
                                 std::uint64_t seed = default_seed);

  std::string name() const { return name_; }
  static constexpr const char* partition_name(partition p) noexcept {
    return p == partition::linear ? "linear" : "natural";
  }
  /// S: the highest level.
  std::uint32_t top_level() const noexcept {
    return partition_ == partition::linear ? s_ : std::uint32_t{1} << (s_ - 1);
  }

  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const {
    return 8 + (max_bits(float_elements(name_, bytes, type)) + 7) / 8;
  }

  BYTEPS_DECL std::size_t encode(std::span<const std::byte> in, dtype type,
                                 std::span<std::byte> out);

  BYTEPS_DECL void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out);

 private:
  // Bits for n elements at worst: an entry's gap code is at most gap + 2 bits (Elias delta of
  // g >= 1 is at most g + 2 long, 2 -> "0100" the tightest) and the gaps add up to at most n;
  // its sign is 1 bit and its level code at most that of S.
  std::size_t max_bits(std::size_t n) const {
    const std::size_t per_entry = 3 + 1 + elias_delta_bits(top_level());
    if (n > (std::numeric_limits<std::uint32_t>::max() - 7) / (per_entry + 1))
      throw usage_error(fmt::format(
          "compressor '{}': a partition of {} elements is too large for the stream's bit count; "
          "set BYTEPS_PARTITION_BYTES smaller",
          name_, n));
    return n + n * per_entry;
  }

  float norm_of(std::span<const float> x) const noexcept {
    if (normalize_ == normalize::max) {
      float m = 0;
      for (float v : x) {
        if (std::isnan(v)) return v;  // std::max would skip it
        m = std::max(m, std::fabs(v));
      }
      return m;
    }
    double sum = 0;
    for (float v : x) sum += static_cast<double>(v) * static_cast<double>(v);
    return static_cast<float>(std::sqrt(sum));
  }

  std::uint64_t quantise(double r, double u) const noexcept {
    double lo, width;
    if (partition_ == partition::linear) {
      lo = std::floor(r);
      width = 1;
    } else if (r < 1) {
      lo = 0;
      width = 1;
    } else {
      lo = static_cast<double>(std::bit_floor(static_cast<std::uint64_t>(r)));
      width = lo;
    }
    const double level = u < (r - lo) / width ? lo + width : lo;
    return static_cast<std::uint64_t>(level);
  }

  std::uint32_t s_;
  partition partition_;
  normalize normalize_;
  std::uint64_t seed_;
  xorshift128p rng_;
  std::string name_;
  std::vector<float> scratch_;  // non-float32 or unaligned tensors only
};

}  // namespace bps::compress

#if BYTEPS_INCLUDE_BODIES
#include "byteps/compress/impl/dithering.hpp"
#endif
