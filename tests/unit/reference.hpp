#pragma once
// Reference implementations shared by test_half.cpp and test_reducer.cpp.
//
// The references below are deliberately built from <cmath> (frexp, ldexp, nearbyint) and wide
// integer arithmetic rather than the bit tricks of half.hpp and reducer.hpp, so that a mistake
// there cannot be mirrored here.

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
#include <vector>

namespace bps_test {

using bps::bfloat16;
using bps::float16;

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

inline std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
inline float float_of(std::uint32_t b) { return std::bit_cast<float>(b); }

/// Value of a binary format with `frac` fraction bits and exponent `bias`, from its fields.
inline float ref_decode(std::uint32_t bits, int frac, int exp_bits, int bias) {
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
inline std::uint32_t ref_round(float x, int frac, int exp_bits, int bias) {
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

inline float ref_widen(float16 h) { return ref_decode(h.bits, 10, 5, 15); }
inline float ref_widen(bfloat16 h) { return ref_decode(h.bits, 7, 8, 127); }

inline std::uint16_t ref_f16_bits(float x) {
  return std::isnan(x) ? 0x7e00 : static_cast<std::uint16_t>(ref_round(x, 10, 5, 15));
}
inline std::uint16_t ref_bf16_bits(float x) {
  return std::isnan(x) ? 0x7fc0 : static_cast<std::uint16_t>(ref_round(x, 7, 8, 127));
}
inline float16 ref_narrow(float x, float16) { return float16{ref_f16_bits(x)}; }
inline bfloat16 ref_narrow(float x, bfloat16) { return bfloat16{ref_bf16_bits(x)}; }

inline bool is_nan16(float16 h) { return (h.bits & 0x7c00) == 0x7c00 && (h.bits & 0x03ff) != 0; }
inline bool is_nan16(bfloat16 h) { return (h.bits & 0x7f80) == 0x7f80 && (h.bits & 0x007f) != 0; }

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

}  // namespace bps_test
