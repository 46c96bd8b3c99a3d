#pragma once
/// @file
/// Conversions between binary32 and the two 16-bit float types byteps carries.
///
/// The server never adds fp16 or bf16 values in their own precision: it widens every
/// contribution to fp32, sums there, and rounds once at the end (see reduce/reducer.hpp). That
/// makes these conversions part of the numerical contract, so they are exact (IEEE
/// round-to-nearest-even, subnormals in both directions, NaN kept as a quiet NaN) rather than
/// the truncating shortcuts often used for speed.
///
/// The scalar functions compute every candidate result unconditionally and pick one with bit
/// masks, not branches, so that the batch loops below stay auto-vectorisable (GCC -O3). A
/// hardware fast path (F16C on x86) belongs inside those batch functions; the scalar functions
/// stay the portable reference and the `constexpr` path. The few floating-point steps they use
/// never produce or depend on binary32 subnormals, so results are the same under FTZ/DAZ.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include <byteps/core/dtype.hpp>
#include <byteps/reduce/f16c.hpp>

namespace bps {

namespace detail {

/// `cond ? a : b` as bit masks. A ternary would let GCC sink a floating-point candidate into a
/// branch, and under the default -ftrapping-math it then refuses to if-convert that branch back
/// (the operation might trap), which leaves the whole loop scalar.
constexpr std::uint32_t blend_bits(bool cond, std::uint32_t a, std::uint32_t b) noexcept {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

}  // namespace detail

/// Exact: every binary16 value, subnormals included, is representable in binary32.
/// A NaN keeps its payload and comes back quiet, as F16C's vcvtph2ps does, so a later fast
/// path gives bit-identical results.
constexpr float to_float(float16 h) noexcept {
  const std::uint32_t bits = h.bits;
  const std::uint32_t sign = (bits & 0x8000u) << 16;
  const std::uint32_t magnitude = bits & 0x7fffu;  // exponent and mantissa fields
  const std::uint32_t shifted = magnitude << 13;   // mantissa aligned to binary32's

  // Normal: only the exponent bias differs (15 versus 127).
  const std::uint32_t normal = shifted + ((127u - 15u) << 23);
  // Subnormal (and zero): the value is mantissa * 2^-24; both factors and the product are exact
  // binary32 values (normal or zero), so one multiplication decodes it without counting
  // leading zeros.
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(
      static_cast<float>(static_cast<std::int32_t>(magnitude)) * 0x1p-24f);
  // Infinity or NaN: maximal exponent, payload kept, quiet bit set for NaN only.
  const std::uint32_t special =
      0x7f800000u | shifted | detail::blend_bits(magnitude > 0x7c00u, 0x00400000u, 0u);

  std::uint32_t out = detail::blend_bits(magnitude < 0x0400u, subnormal, normal);
  out = detail::blend_bits(magnitude >= 0x7c00u, special, out);
  return std::bit_cast<float>(sign | out);
}

/// Exact: bfloat16 is the upper half of a binary32.
constexpr float to_float(bfloat16 h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h.bits) << 16);
}

/// Rounds to nearest, ties to even; overflows to infinity; a NaN stays a quiet NaN with the top
/// of its payload kept.
constexpr float16 to_float16(float f) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;

  // Normal result: rebias the exponent, then round on the 13 dropped bits by adding just under
  // half an ulp plus the kept lsb (so that an exact tie rounds up only from an odd mantissa). A
  // carry out of the mantissa correctly bumps the exponent. For inputs that are not in the
  // normal range the unsigned arithmetic wraps harmlessly and the value is discarded below.
  const std::uint32_t normal =
      (magnitude - ((127u - 15u) << 23) + 0x0fffu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal result (|f| < 2^-14): adding 0.5 puts the value in a binade whose ulp is 2^-24,
  // binary16's subnormal step, so the FPU's own round-to-nearest-even does the rounding and the
  // low mantissa bits are the answer. A rounded-up 2^-14 yields 0x0400, the right encoding.
  // The operand is clamped so that constant evaluation never meets an infinity or NaN here;
  // a min, unlike a select on the same condition as below, gives GCC no branch to sink into.
  const std::uint32_t small = std::min(magnitude, 0x38800000u);
  const std::uint32_t subnormal =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(small) + 0.5f) - 0x3f000000u;
  const std::uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x03ffu);

  std::uint32_t out = detail::blend_bits(magnitude < 0x38800000u, subnormal, normal);
  // 65520 is the midpoint between 65504 (largest finite, odd mantissa) and 2^16: the tie goes
  // to the even side, infinity. (The rounding add alone would carry 65520 into 0x7c00 as well,
  // but not values further out.)
  out = detail::blend_bits(magnitude >= 0x477ff000u, 0x7c00u, out);
  out = detail::blend_bits(magnitude > 0x7f800000u, nan, out);
  return float16{static_cast<std::uint16_t>(sign | out)};
}

/// Rounds to nearest, ties to even, on the 16 dropped bits; finite values past the largest
/// bfloat16 round to infinity. A NaN stays a NaN (made quiet, sign kept) instead of rounding
/// into infinity, which the plain rounding add would do for small payloads.
constexpr bfloat16 to_bfloat16(float f) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t nan = (bits >> 16) | 0x0040u;
  const std::uint32_t out = (bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
  return bfloat16{static_cast<std::uint16_t>(out)};
}

namespace reduce {

// Batch forms used by the reducer's hot loops: plain counted loops over the scalar conversions
// (GCC vectorises them at -O3), with fp16 going through F16C where the CPU has it.

inline void widen_to_f32(const float16* __restrict src, float* __restrict dst,
                         std::size_t n) noexcept {
  std::size_t i = f16c::has_f16c() ? f16c::widen(src, dst, n) : 0;
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

inline void widen_to_f32(const bfloat16* __restrict src, float* __restrict dst,
                         std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

inline void narrow_from_f32(const float* __restrict src, float16* __restrict dst,
                            std::size_t n) noexcept {
  std::size_t i = f16c::has_f16c() ? f16c::narrow(src, dst, n) : 0;
  for (; i < n; ++i) dst[i] = to_float16(src[i]);
}

inline void narrow_from_f32(const float* __restrict src, bfloat16* __restrict dst,
                            std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bfloat16(src[i]);
}

}  // namespace reduce
}  // namespace bps
