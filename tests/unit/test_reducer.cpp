#include <byteps/reduce/reducer.hpp>

#include <byteps/reduce/half.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

// The references below are deliberately built from <cmath> (frexp, ldexp, nearbyint) and wide
// integer arithmetic rather than the bit tricks of half.hpp and reducer.hpp, so that a mistake
// there cannot be mirrored here.

namespace {

using bps::bfloat16;
using bps::dtype;
using bps::float16;

__extension__ typedef __int128 int128;

/// splitmix64: deterministic, so a failure reproduces.
struct rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi].
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
};

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float float_of(std::uint32_t b) { return std::bit_cast<float>(b); }

/// Value of a binary format with `frac` fraction bits and exponent `bias`, from its fields.
float ref_decode(std::uint32_t bits, int frac, int exp_bits, int bias) {
  const std::uint32_t e = (bits >> frac) & ((1u << exp_bits) - 1);
  const std::uint32_t m = bits & ((1u << frac) - 1);
  float mag;
  if (e == (1u << exp_bits) - 1) {
    mag = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (e == 0) {
    mag = std::ldexp(static_cast<float>(m), 1 - bias - frac);
  } else {
    mag = std::ldexp(static_cast<float>((1u << frac) + m), static_cast<int>(e) - bias - frac);
  }
  return (bits >> (frac + exp_bits)) & 1u ? -mag : mag;
}

/// Rounds a non-NaN float to nearest-even in that binary format and returns its bits.
std::uint32_t ref_round(float x, int frac, int exp_bits, int bias) {
  const std::uint32_t sign = std::signbit(x) ? 1u << (frac + exp_bits) : 0u;
  const std::uint32_t inf = ((1u << exp_bits) - 1) << frac;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return sign | inf;
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);                   // a in [2^(e-1), 2^e)
  int ex = std::max(e - 1, 1 - bias);  // below the normal range the ulp stops shrinking
  double q = std::nearbyint(std::ldexp(a, frac - ex));  // default mode: ties to even
  if (q >= std::ldexp(1.0, frac + 1)) {                 // rounding carried into the next binade
    q /= 2;
    ++ex;
  }
  if (ex > bias) return sign | inf;
  const auto iq = static_cast<std::uint32_t>(q);
  if (iq < (1u << frac)) return sign | iq;  // subnormal
  return sign | (static_cast<std::uint32_t>(ex + bias) << frac) | (iq - (1u << frac));
}

float ref_widen(float16 h) { return ref_decode(h.bits, 10, 5, 15); }
float ref_widen(bfloat16 h) { return ref_decode(h.bits, 7, 8, 127); }

std::uint16_t ref_f16_bits(float x) {
  return std::isnan(x) ? 0x7e00 : static_cast<std::uint16_t>(ref_round(x, 10, 5, 15));
}
std::uint16_t ref_bf16_bits(float x) {
  return std::isnan(x) ? 0x7fc0 : static_cast<std::uint16_t>(ref_round(x, 7, 8, 127));
}
float16 ref_narrow(float x, float16) { return float16{ref_f16_bits(x)}; }
bfloat16 ref_narrow(float x, bfloat16) { return bfloat16{ref_bf16_bits(x)}; }

bool is_nan16(float16 h) { return (h.bits & 0x7c00) == 0x7c00 && (h.bits & 0x03ff) != 0; }
bool is_nan16(bfloat16 h) { return (h.bits & 0x7f80) == 0x7f80 && (h.bits & 0x007f) != 0; }

template <class T>
std::uint64_t raw_bits(const T& v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

/// Empty when bit-identical, else the first difference (Catch prints it on failure).
template <class T>
std::string mismatch(const T* got, const T* want, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "element %zu of %zu: got 0x%llx, want 0x%llx", i, n,
                    static_cast<unsigned long long>(raw_bits(got[i])),
                    static_cast<unsigned long long>(raw_bits(want[i])));
      return buf;
    }
  }
  return {};
}

template <class T>
std::string mismatch(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  return mismatch(got.data(), want.data(), got.size());
}

// ---- per-dtype worker contributions and the expected results --------------------------------

constexpr int fp32_shift = 6;   // fp32 values are k * 2^-6 with |k| <= 2^20: sums of 3 are exact
constexpr int fp64_shift = 10;  // fp64 values are k * 2^-10 with |k| <= 2^50: sums of 3 are exact

template <class T>
struct workers {
  std::vector<T> w[3];
  std::vector<T> accumulated;  // init(w0), add(w1), add(w2), finish
  std::vector<T> summed;       // w0, sum_into(w1), sum_into(w2)
};

template <class T>
T make_value(rng& r, std::size_t i, int worker, std::vector<std::int64_t>* exact) {
  if constexpr (std::is_integral_v<T>) {
    using lim = std::numeric_limits<T>;
    // Extremes on some lanes guarantee overflow in both directions; the rest is random bits.
    switch ((i + static_cast<std::size_t>(worker)) % 6) {
      case 0: return lim::max();
      case 1: return lim::min();
      default: return static_cast<T>(r.next());
    }
  } else if constexpr (std::is_same_v<T, float>) {
    const std::int64_t k = r.between(-(1 << 20), 1 << 20);
    exact->push_back(k);
    return std::ldexp(static_cast<float>(k), -fp32_shift);
  } else if constexpr (std::is_same_v<T, double>) {
    const std::int64_t k = r.between(-(std::int64_t{1} << 50), std::int64_t{1} << 50);
    exact->push_back(k);
    return std::ldexp(static_cast<double>(k), -fp64_shift);
  } else {
    // Any finite pattern on even lanes; on odd lanes a narrow exponent window so the three
    // values are comparable and their sums cancel and tie often.
    constexpr bool f16 = std::is_same_v<T, float16>;
    constexpr std::uint16_t exp_mask = f16 ? 0x7c00 : 0x7f80;
    constexpr int frac = f16 ? 10 : 7;
    auto b = static_cast<std::uint16_t>(r.next());
    if (i % 2 == 1) {
      const auto e = static_cast<std::uint16_t>(f16 ? r.between(12, 18) : r.between(124, 130));
      b = static_cast<std::uint16_t>((b & ~exp_mask) | (e << frac));
    }
    if ((b & exp_mask) == exp_mask) b = static_cast<std::uint16_t>(b & ~exp_mask);  // no inf/NaN
    return T{b};
  }
}

/// Sum modulo 2^bits of T, computed exactly in 128 bits and then reduced, independently of the
/// unsigned-wrap trick the reducer uses.
template <class T>
T ref_wrapped_sum(T a, T b, T c) {
  constexpr int bits = std::numeric_limits<T>::digits + (std::is_signed_v<T> ? 1 : 0);
  const int128 modulus = int128{1} << bits;
  int128 s = (int128{a} + int128{b} + int128{c}) % modulus;
  if (s < 0) s += modulus;
  if (std::is_signed_v<T> && s >= modulus / 2) s -= modulus;
  return static_cast<T>(s);
}

template <class T>
workers<T> make_workers(std::size_t count, std::uint64_t seed) {
  rng r{seed};
  workers<T> ws;
  std::vector<std::int64_t> exact[3];
  for (int k = 0; k < 3; ++k) {
    ws.w[k].reserve(count);
    for (std::size_t i = 0; i < count; ++i) ws.w[k].push_back(make_value<T>(r, i, k, &exact[k]));
  }
  for (std::size_t i = 0; i < count; ++i) {
    const T a = ws.w[0][i], b = ws.w[1][i], c = ws.w[2][i];
    if constexpr (std::is_integral_v<T>) {
      ws.accumulated.push_back(ref_wrapped_sum(a, b, c));
      ws.summed.push_back(ref_wrapped_sum(a, b, c));
    } else if constexpr (std::is_floating_point_v<T>) {
      const std::int64_t k = exact[0][i] + exact[1][i] + exact[2][i];
      const int shift = std::is_same_v<T, float> ? fp32_shift : fp64_shift;
      const T v = std::ldexp(static_cast<T>(k), -shift);
      ws.accumulated.push_back(v);
      ws.summed.push_back(v);
    } else {
      // Accumulator: widen each, sum in fp32 in worker order, round once.
      float s = ref_widen(a);
      s += ref_widen(b);
      s += ref_widen(c);
      ws.accumulated.push_back(ref_narrow(s, T{}));
      // sum_into rounds once per call.
      const T ab = ref_narrow(ref_widen(a) + ref_widen(b), T{});
      ws.summed.push_back(ref_narrow(ref_widen(ab) + ref_widen(c), T{}));
    }
  }
  return ws;
}

/// A buffer of `bytes` aligned for any element type the reducer handles.
struct raw_buffer {
  std::vector<std::uint64_t> storage;
  explicit raw_buffer(std::size_t bytes) : storage(bytes / 8 + 1) {}
  void* data() { return storage.data(); }
};

template <class T>
void check_reduction(std::size_t count) {
  const dtype t = bps::dtype_v<T>;
  INFO("dtype " << bps::dtype_name(t) << ", count " << count);
  const auto ws = make_workers<T>(count, 0x5eed0000u + count * 16 + static_cast<unsigned>(t));

  raw_buffer acc(bps::reduce::accumulator_bytes(t, count));
  bps::reduce::accumulate_init(acc.data(), ws.w[0].data(), count, t);
  bps::reduce::accumulate_add(acc.data(), ws.w[1].data(), count, t);
  bps::reduce::accumulate_add(acc.data(), ws.w[2].data(), count, t);

  std::vector<T> out(count);
  bps::reduce::accumulate_finish(out.data(), acc.data(), count, t);
  CHECK(mismatch(out, ws.accumulated) == "");

  // The server may reply straight from its accumulator.
  bps::reduce::accumulate_finish(acc.data(), acc.data(), count, t);
  CHECK(mismatch(static_cast<const T*>(acc.data()), ws.accumulated.data(), count) == "");

  std::vector<T> dst = ws.w[0];
  bps::reduce::sum_into(dst.data(), ws.w[1].data(), count, t);
  bps::reduce::sum_into(dst.data(), ws.w[2].data(), count, t);
  CHECK(mismatch(dst, ws.summed) == "");

  // Sources are read-only.
  const auto again = make_workers<T>(count, 0x5eed0000u + count * 16 + static_cast<unsigned>(t));
  for (int k = 0; k < 3; ++k) CHECK(mismatch(ws.w[k], again.w[k]) == "");
}

/// Runs `f.template operator()<T>()` for the element type of a runtime tag, so that a loop over
/// `bps::all_dtypes` reaches every typed check and a dtype added later fails loudly here.
template <class F>
void with_type(dtype t, F&& f) {
  switch (t) {
    case dtype::float32: return f.template operator()<float>();
    case dtype::float64: return f.template operator()<double>();
    case dtype::float16: return f.template operator()<float16>();
    case dtype::bfloat16: return f.template operator()<bfloat16>();
    case dtype::int8: return f.template operator()<std::int8_t>();
    case dtype::uint8: return f.template operator()<std::uint8_t>();
    case dtype::int32: return f.template operator()<std::int32_t>();
    case dtype::int64: return f.template operator()<std::int64_t>();
  }
  FAIL("test has no element type for dtype " << static_cast<int>(t));
}

constexpr std::size_t counts[] = {0, 1, 7, 1023, 4097};

}  // namespace

// ---- half conversions -----------------------------------------------------------------------

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

// ---- reductions -----------------------------------------------------------------------------

TEST_CASE("accumulator_bytes widens only the 16-bit floats", "[reduce]") {
  for (const dtype t : bps::all_dtypes) {
    INFO(bps::dtype_name(t));
    const std::size_t per = (t == dtype::float16 || t == dtype::bfloat16) ? 4 : bps::dtype_size(t);
    CHECK(bps::reduce::accumulator_bytes(t, 0) == 0);
    CHECK(bps::reduce::accumulator_bytes(t, 4097) == 4097 * per);
  }
  static_assert(bps::reduce::accumulator_bytes(dtype::bfloat16, 3) == 12);
}

TEST_CASE("three workers reduce exactly, for every dtype and awkward counts", "[reduce]") {
  for (const dtype t : bps::all_dtypes) {
    for (const std::size_t n : counts) {
      with_type(t, [n]<class T>() { check_reduction<T>(n); });
    }
  }
}

TEST_CASE("integer sums wrap modulo 2^bits", "[reduce]") {
  auto sum3 = []<class T>(T a, T b, T c) {
    const dtype t = bps::dtype_v<T>;
    T acc{};
    bps::reduce::accumulate_init(&acc, &a, 1, t);
    bps::reduce::accumulate_add(&acc, &b, 1, t);
    bps::reduce::accumulate_add(&acc, &c, 1, t);
    T out{};
    bps::reduce::accumulate_finish(&out, &acc, 1, t);
    T dst = a;
    bps::reduce::sum_into(&dst, &b, 1, t);
    bps::reduce::sum_into(&dst, &c, 1, t);
    CHECK(dst == out);
    return out;
  };
  CHECK(sum3(std::int8_t{100}, std::int8_t{100}, std::int8_t{100}) == std::int8_t{44});
  CHECK(sum3(std::int8_t{127}, std::int8_t{1}, std::int8_t{0}) == std::int8_t{-128});
  CHECK(sum3(std::int8_t{-128}, std::int8_t{-1}, std::int8_t{0}) == std::int8_t{127});
  CHECK(sum3(std::uint8_t{255}, std::uint8_t{2}, std::uint8_t{0}) == std::uint8_t{1});
  CHECK(sum3(std::int32_t{2147483647}, std::int32_t{1}, std::int32_t{0}) ==
        std::numeric_limits<std::int32_t>::min());
  constexpr auto i64max = std::numeric_limits<std::int64_t>::max();
  CHECK(sum3(i64max, i64max, std::int64_t{2}) == 0);
  CHECK(sum3(std::numeric_limits<std::int64_t>::min(), std::int64_t{-1}, std::int64_t{0}) ==
        i64max);
}

TEST_CASE("16-bit floats accumulate in fp32 and round once", "[reduce]") {
  // 2048 + 1 + 1: rounding after each step would give 2048 twice (ties to even), fp32 gives 2050.
  const float16 a = bps::to_float16(2048.0f), one = bps::to_float16(1.0f);
  float acc = 0;
  bps::reduce::accumulate_init(&acc, &a, 1, dtype::float16);
  bps::reduce::accumulate_add(&acc, &one, 1, dtype::float16);
  bps::reduce::accumulate_add(&acc, &one, 1, dtype::float16);
  CHECK(acc == 2050.0f);
  float16 out{};
  bps::reduce::accumulate_finish(&out, &acc, 1, dtype::float16);
  CHECK(out.bits == bps::to_float16(2050.0f).bits);

  float16 dst = a;
  bps::reduce::sum_into(&dst, &one, 1, dtype::float16);
  bps::reduce::sum_into(&dst, &one, 1, dtype::float16);
  CHECK(dst.bits == bps::to_float16(2048.0f).bits);
}

TEST_CASE("scale multiplies floating dtypes", "[reduce][scale]") {
  SECTION("float32 and float64 by exact factors, and float32 in single precision") {
    std::vector<float> f(1023);
    std::vector<double> d(1023);
    rng r{3};
    for (std::size_t i = 0; i < f.size(); ++i) {
      f[i] = static_cast<float>(r.between(-(1 << 22), 1 << 22));
      d[i] = static_cast<double>(r.between(-(std::int64_t{1} << 50), std::int64_t{1} << 50));
    }
    auto f_half = f, f_tenth = f;
    auto d_half = d, d_tenth = d;
    bps::reduce::scale(f_half.data(), f.size(), dtype::float32, 0.5);
    bps::reduce::scale(f_tenth.data(), f.size(), dtype::float32, 0.1);
    bps::reduce::scale(d_half.data(), d.size(), dtype::float64, 0.5);
    bps::reduce::scale(d_tenth.data(), d.size(), dtype::float64, 0.1);
    std::vector<float> want_fh(f.size()), want_ft(f.size());
    std::vector<double> want_dh(d.size()), want_dt(d.size());
    const float tenth = static_cast<float>(0.1);
    for (std::size_t i = 0; i < f.size(); ++i) {
      want_fh[i] = std::ldexp(f[i], -1);
      want_ft[i] = f[i] * tenth;
      want_dh[i] = std::ldexp(d[i], -1);
      want_dt[i] = d[i] * 0.1;
    }
    CHECK(mismatch(f_half, want_fh) == "");
    CHECK(mismatch(f_tenth, want_ft) == "");
    CHECK(mismatch(d_half, want_dh) == "");
    CHECK(mismatch(d_tenth, want_dt) == "");
  }

  SECTION("float16 and bfloat16, every pattern, through fp32 with one rounding") {
    for (const double factor : {0.5, 0.25, 2.0, -1.0, 1.0 / 3.0}) {
      INFO("factor " << factor);
      std::vector<float16> h(65536), want_h(65536);
      std::vector<bfloat16> b(65536), want_b(65536);
      for (std::uint32_t i = 0; i <= 0xffff; ++i) {
        h[i].bits = b[i].bits = static_cast<std::uint16_t>(i);
        const float ff = static_cast<float>(factor);
        want_h[i] = ref_narrow(ref_widen(h[i]) * ff, float16{});
        want_b[i] = ref_narrow(ref_widen(b[i]) * ff, bfloat16{});
      }
      bps::reduce::scale(h.data(), h.size(), dtype::float16, factor);
      bps::reduce::scale(b.data(), b.size(), dtype::bfloat16, factor);
      for (std::uint32_t i = 0; i <= 0xffff; ++i) {
        // NaN payloads are not part of the contract; NaN-ness is.
        if (is_nan16(want_h[i])) {
          h[i] = want_h[i] = float16{static_cast<std::uint16_t>(is_nan16(h[i]) ? 1 : 0)};
        }
        if (is_nan16(want_b[i])) {
          b[i] = want_b[i] = bfloat16{static_cast<std::uint16_t>(is_nan16(b[i]) ? 1 : 0)};
        }
      }
      CHECK(mismatch(h, want_h) == "");
      CHECK(mismatch(b, want_b) == "");
    }
  }

  SECTION("an empty buffer is fine") {
    bps::reduce::scale(nullptr, 0, dtype::float32, 0.5);
  }
}

TEST_CASE("scale refuses integer dtypes, naming them", "[reduce][scale]") {
  for (const dtype t : bps::all_dtypes) {
    if (bps::is_floating(t)) continue;
    const std::string name(bps::dtype_name(t));
    INFO(name);
    std::int64_t data[4] = {1, 2, 3, 4};
    CHECK_THROWS_AS(bps::reduce::scale(data, 4, t, 0.5), bps::usage_error);
    CHECK_THROWS_WITH(bps::reduce::scale(data, 4, t, 0.5),
                      Catch::Contains(name) && Catch::Contains("floating dtypes only"));
    CHECK(data[0] == 1);
  }
}

TEST_CASE("an unknown dtype tag is a usage error, not a silent no-op", "[reduce]") {
  const auto bogus = static_cast<dtype>(200);
  float a[2] = {1, 2}, b[2] = {3, 4};
  CHECK_THROWS_AS(bps::reduce::accumulate_init(a, b, 2, bogus), bps::usage_error);
  CHECK_THROWS_AS(bps::reduce::accumulate_add(a, b, 2, bogus), bps::usage_error);
  CHECK_THROWS_AS(bps::reduce::accumulate_finish(a, b, 2, bogus), bps::usage_error);
  CHECK_THROWS_AS(bps::reduce::sum_into(a, b, 2, bogus), bps::usage_error);
  CHECK_THROWS_AS(bps::reduce::scale(a, 2, bogus, 0.5), bps::usage_error);
}
