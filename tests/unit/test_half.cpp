#include <byteps/reduce/half.hpp>

#include <catch2/catch.hpp>

#include "reference.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

// fp16/bf16 conversions: scalar, constexpr and batch, each checked against reference.hpp.

namespace {

using bps::bfloat16;
using bps::float16;
using bps_test::bits_of;
using bps_test::float_of;
using bps_test::is_nan16;
using bps_test::mismatch;
using bps_test::ref_bf16_bits;
using bps_test::ref_f16_bits;
using bps_test::ref_widen;
using bps_test::rng;

}  // namespace

// The conversions are usable in constant expressions, subnormals included.
static_assert(bps::to_float16(1.0f).bits == 0x3c00);
static_assert(bps::to_float16(0x1p-24f).bits == 0x0001);
static_assert(bps::to_float16(-65520.0f).bits == 0xfc00);
static_assert(bps::to_float(float16{0x0001}) == 0x1p-24f);
static_assert(bps::to_float(float16{0xc000}) == -2.0f);
static_assert(bps::to_bfloat16(1.0f).bits == 0x3f80);
static_assert(bps::to_float(bfloat16{0x3f80}) == 1.0f);

TEST_CASE("float -> float16 gives the IEEE bit patterns", "[reduce][half]") {
  using bps::to_float16;
  CHECK(to_float16(1.0f).bits == 0x3c00);
  CHECK(to_float16(-2.0f).bits == 0xc000);
  CHECK(to_float16(0.0f).bits == 0x0000);
  CHECK(to_float16(-0.0f).bits == 0x8000);
  CHECK(to_float16(65504.0f).bits == 0x7bff);
  CHECK(to_float16(std::nextafter(65520.0f, 0.0f)).bits == 0x7bff);
  CHECK(to_float16(65520.0f).bits == 0x7c00);  // tie between 65504 (odd) and 2^16: infinity
  CHECK(to_float16(-65520.0f).bits == 0xfc00);
  CHECK(to_float16(1e30f).bits == 0x7c00);
  CHECK(to_float16(std::numeric_limits<float>::max()).bits == 0x7c00);
  CHECK(to_float16(std::numeric_limits<float>::infinity()).bits == 0x7c00);
  CHECK(to_float16(-std::numeric_limits<float>::infinity()).bits == 0xfc00);
  // Smallest normal and the subnormal range.
  CHECK(to_float16(0x1p-14f).bits == 0x0400);
  CHECK(to_float16(0x1p-24f).bits == 0x0001);
  CHECK(to_float16(-0x1p-24f).bits == 0x8001);
  CHECK(to_float16(0x1p-25f).bits == 0x0000);  // tie between 0 (even) and 2^-24
  CHECK(to_float16(-0x1p-25f).bits == 0x8000);
  CHECK(to_float16(std::nextafter(0x1p-25f, 1.0f)).bits == 0x0001);
  CHECK(to_float16(3 * 0x1p-25f).bits == 0x0002);  // tie between 1 and 2 ulps: 2
  CHECK(to_float16(5 * 0x1p-25f).bits == 0x0002);  // tie between 2 and 3 ulps: 2
  CHECK(to_float16(1023.5f * 0x1p-24f).bits == 0x0400);  // largest subnormal rounds up to normal
  CHECK(to_float16(1022.5f * 0x1p-24f).bits == 0x03fe);
  CHECK(to_float16(0x1p-149f).bits == 0x0000);  // binary32 subnormal
  CHECK(to_float16(-0x1p-149f).bits == 0x8000);
  // Ties in the normal range.
  CHECK(to_float16(1.0f + 0x1p-11f).bits == 0x3c00);
  CHECK(to_float16(1.0f + 3 * 0x1p-11f).bits == 0x3c02);
  CHECK(to_float16(1.0f + 0x1p-11f + 0x1p-20f).bits == 0x3c01);
  CHECK(to_float16(2.0f - 0x1p-12f).bits == 0x4000);  // carries into the exponent
  // NaN stays a quiet NaN, whatever its payload; the sign is kept.
  for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0xffc00000u, 0xff800001u}) {
    INFO("binary32 NaN 0x" << std::hex << nan);
    const float16 h = to_float16(float_of(nan));
    CHECK(is_nan16(h));
    CHECK((h.bits & 0x0200) != 0);
    CHECK((h.bits >> 15) == (nan >> 31));
    CHECK(std::isnan(bps::to_float(h)));
  }
}

TEST_CASE("float16 -> float decodes every class", "[reduce][half]") {
  using bps::to_float;
  CHECK(to_float(float16{0x3c00}) == 1.0f);
  CHECK(to_float(float16{0x7bff}) == 65504.0f);
  CHECK(to_float(float16{0x0400}) == 0x1p-14f);
  CHECK(to_float(float16{0x03ff}) == 1023 * 0x1p-24f);
  CHECK(to_float(float16{0x0001}) == 0x1p-24f);
  CHECK(to_float(float16{0x8001}) == -0x1p-24f);
  CHECK(bits_of(to_float(float16{0x0000})) == 0x00000000u);
  CHECK(bits_of(to_float(float16{0x8000})) == 0x80000000u);
  CHECK(to_float(float16{0x7c00}) == std::numeric_limits<float>::infinity());
  CHECK(to_float(float16{0xfc00}) == -std::numeric_limits<float>::infinity());
  CHECK(bits_of(to_float(float16{0x7e00})) == 0x7fc00000u);
  // A signalling NaN must not decode as infinity, and comes back quiet (as F16C does) with its
  // payload and sign kept.
  CHECK(bits_of(to_float(float16{0x7c01})) == 0x7fc02000u);
  CHECK(bits_of(to_float(float16{0xfd00})) == 0xffe00000u);
}

TEST_CASE("every float16 survives float16 -> float -> float16", "[reduce][half]") {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const float16 h{static_cast<std::uint16_t>(b)};
    const float f = bps::to_float(h);
    const float16 back = bps::to_float16(f);
    if (is_nan16(h)) {
      if (!std::isnan(f) || !is_nan16(back)) FAIL("NaN 0x" << std::hex << b << " lost");
      continue;
    }
    // Also against the <cmath> decoding, so a symmetric bug in both directions is caught.
    if (bits_of(f) != bits_of(ref_widen(h)) || back.bits != b) {
      FAIL("float16 0x" << std::hex << b << " -> 0x" << bits_of(f) << " -> 0x" << back.bits);
    }
  }
  SUCCEED("all 65536 float16 patterns");
}

TEST_CASE("float -> float16 rounds every midpoint to even", "[reduce][half]") {
  // For each pair of adjacent finite float16 values, their midpoint (exact in binary32) and the
  // floats either side of it; and a random sweep against the <cmath> reference.
  for (std::uint16_t b = 0; b <= 0x7bff; ++b) {
    const double lo = ref_widen(float16{b});
    const double hi = b == 0x7bff ? 65536.0 : ref_widen(float16{static_cast<std::uint16_t>(b + 1)});
    const auto mid = static_cast<float>((lo + hi) / 2);
    const auto up = static_cast<std::uint16_t>(b + 1);
    const std::uint16_t even = (b & 1) ? up : b;
    for (const std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
      const float s = sign ? -1.0f : 1.0f;
      const std::uint16_t below = bps::to_float16(s * std::nextafter(mid, 0.0f)).bits;
      const std::uint16_t at = bps::to_float16(s * mid).bits;
      const std::uint16_t above = bps::to_float16(s * std::nextafter(mid, 1e9f)).bits;
      if (below != (sign | b) || at != (sign | even) || above != (sign | up)) {
        FAIL("midpoint above float16 0x" << std::hex << (sign | b) << ": got 0x" << below
                                         << "/0x" << at << "/0x" << above);
      }
    }
  }
  rng r{42};
  for (int i = 0; i < (1 << 18); ++i) {
    const float f = float_of(static_cast<std::uint32_t>(r.next()));
    if (std::isnan(f)) continue;
    if (bps::to_float16(f).bits != ref_f16_bits(f)) {
      FAIL("float 0x" << std::hex << bits_of(f) << " -> 0x" << bps::to_float16(f).bits
                      << ", want 0x" << ref_f16_bits(f));
    }
  }
  SUCCEED("all float16 midpoints and 2^18 random floats");
}

TEST_CASE("float -> bfloat16 rounds to nearest even on the upper half", "[reduce][half]") {
  using bps::to_bfloat16;
  CHECK(to_bfloat16(1.0f).bits == 0x3f80);
  CHECK(to_bfloat16(float_of(0x3f808000u)).bits == 0x3f80);  // tie, even below
  CHECK(to_bfloat16(float_of(0x3f818000u)).bits == 0x3f82);  // tie, even above
  CHECK(to_bfloat16(float_of(0x3f807fffu)).bits == 0x3f80);
  CHECK(to_bfloat16(float_of(0x3f808001u)).bits == 0x3f81);
  CHECK(to_bfloat16(float_of(0xbf818000u)).bits == 0xbf82);
  CHECK(to_bfloat16(float_of(0x3fff8000u)).bits == 0x4000);  // carries into the exponent
  CHECK(to_bfloat16(0.0f).bits == 0x0000);
  CHECK(to_bfloat16(-0.0f).bits == 0x8000);
  CHECK(to_bfloat16(std::numeric_limits<float>::max()).bits == 0x7f80);  // rounds to infinity
  CHECK(to_bfloat16(float_of(0x7f7f7fffu)).bits == 0x7f7f);
  CHECK(to_bfloat16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
  CHECK(to_bfloat16(-std::numeric_limits<float>::infinity()).bits == 0xff80);
  CHECK(to_bfloat16(float_of(0x00008000u)).bits == 0x0000);  // binary32 subnormal tie
  CHECK(to_bfloat16(float_of(0x00018000u)).bits == 0x0002);
  for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u, 0xffffffffu}) {
    INFO("binary32 NaN 0x" << std::hex << nan);
    const bfloat16 h = to_bfloat16(float_of(nan));
    CHECK(is_nan16(h));
    CHECK((h.bits >> 15) == (nan >> 31));
  }
  for (std::uint16_t b = 0; b < 0x7f80; ++b) {  // every finite positive bfloat16 and its negative
    for (const std::uint32_t sign : {0u, 0x80000000u}) {
      const std::uint32_t base = sign | (std::uint32_t{b} << 16);
      const std::uint32_t s16 = sign >> 16;
      const std::uint32_t even = (b & 1) ? b + 1u : b;
      if (to_bfloat16(float_of(base | 0x7fffu)).bits != (s16 | b) ||
          to_bfloat16(float_of(base | 0x8000u)).bits != (s16 | even) ||
          to_bfloat16(float_of(base | 0x8001u)).bits != (s16 | (b + 1u))) {
        FAIL("midpoint above bfloat16 0x" << std::hex << (s16 | b));
      }
    }
  }
  rng r{7};
  for (int i = 0; i < (1 << 18); ++i) {
    const float f = float_of(static_cast<std::uint32_t>(r.next()));
    if (std::isnan(f)) continue;
    if (to_bfloat16(f).bits != ref_bf16_bits(f)) {
      FAIL("float 0x" << std::hex << bits_of(f) << " -> 0x" << to_bfloat16(f).bits);
    }
  }
}

TEST_CASE("every bfloat16 survives bfloat16 -> float -> bfloat16", "[reduce][half]") {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const bfloat16 h{static_cast<std::uint16_t>(b)};
    const float f = bps::to_float(h);
    const bfloat16 back = bps::to_bfloat16(f);
    if (is_nan16(h)) {
      if (!std::isnan(f) || !is_nan16(back)) FAIL("NaN 0x" << std::hex << b << " lost");
      continue;
    }
    if (bits_of(f) != bits_of(ref_widen(h)) || back.bits != b) {
      FAIL("bfloat16 0x" << std::hex << b << " -> 0x" << bits_of(f) << " -> 0x" << back.bits);
    }
  }
  SUCCEED("all 65536 bfloat16 patterns");
}

TEST_CASE("batch conversions agree with the scalar ones", "[reduce][half]") {
  std::vector<float16> h(65536);
  std::vector<bfloat16> bh(65536);
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    h[b].bits = static_cast<std::uint16_t>(b);
    bh[b].bits = static_cast<std::uint16_t>(b);
  }
  std::vector<float> wide(65536), wide_b(65536), want(65536);
  bps::reduce::widen_to_f32(h.data(), wide.data(), h.size());
  for (std::size_t i = 0; i < h.size(); ++i) want[i] = bps::to_float(h[i]);
  CHECK(mismatch(wide, want) == "");
  bps::reduce::widen_to_f32(bh.data(), wide_b.data(), bh.size());
  for (std::size_t i = 0; i < bh.size(); ++i) want[i] = bps::to_float(bh[i]);
  CHECK(mismatch(wide_b, want) == "");

  rng r{99};
  std::vector<float> f(4097);
  for (auto& x : f) x = float_of(static_cast<std::uint32_t>(r.next()));
  std::vector<float16> n16(f.size()), w16(f.size());
  std::vector<bfloat16> nb(f.size()), wb(f.size());
  bps::reduce::narrow_from_f32(f.data(), n16.data(), f.size());
  bps::reduce::narrow_from_f32(f.data(), nb.data(), f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    w16[i] = bps::to_float16(f[i]);
    wb[i] = bps::to_bfloat16(f[i]);
  }
  CHECK(mismatch(n16, w16) == "");
  CHECK(mismatch(nb, wb) == "");
}
