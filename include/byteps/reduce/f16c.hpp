#pragma once
/// @file
/// fp16 conversion with the x86 F16C instructions, chosen at run time (`has_f16c()`), so one
/// binary runs everywhere and uses the hardware where it exists. The software conversions in
/// half.hpp round the same way (to nearest, ties to even; NaN kept and made quiet), and the
/// unit tests compare both over all 65536 fp16 values, so the choice never changes a result.
/// Elsewhere `has_f16c()` is false and these functions are never called.

#include <cstddef>
#include <cstring>

#include "byteps/core/dtype.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define BYTEPS_HAVE_F16C_PATH 1
#endif

namespace bps::reduce::f16c {

#ifdef BYTEPS_HAVE_F16C_PATH

inline bool has_f16c() noexcept {
  // avx through the builtin (it also checks that the OS saves the AVX registers); F16C's bit
  // from cpuid, since clang's builtin does not know the name "f16c".
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  return yes;
}

// Each loop handles 8 elements at a time and leaves the tail (n % 8) to the caller's scalar code;
// each returns how many elements it did.

[[gnu::target("avx,f16c")]] inline std::size_t widen(const float16* src, float* dst,
                                                     std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h;
    std::memcpy(&h, src + i, sizeof h);
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  return i;
}

[[gnu::target("avx,f16c")]] inline std::size_t narrow(const float* src, float16* dst,
                                                      std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(static_cast<void*>(dst + i), &h, sizeof h);
  }
  return i;
}

/// acc += widen(src)
[[gnu::target("avx,f16c")]] inline std::size_t add_widened(float* acc, const float16* src,
                                                           std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h;
    std::memcpy(&h, src + i, sizeof h);
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), _mm256_cvtph_ps(h)));
  }
  return i;
}

/// data = narrow(widen(data) * factor)
[[gnu::target("avx,f16c")]] inline std::size_t scale(float16* data, float factor,
                                                     std::size_t n) noexcept {
  const __m256 f = _mm256_set1_ps(factor);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h;
    std::memcpy(&h, data + i, sizeof h);
    h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(h), f), _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(static_cast<void*>(data + i), &h, sizeof h);
  }
  return i;
}

#else

inline bool has_f16c() noexcept { return false; }
inline std::size_t widen(const float16*, float*, std::size_t) noexcept { return 0; }
inline std::size_t narrow(const float*, float16*, std::size_t) noexcept { return 0; }
inline std::size_t add_widened(float*, const float16*, std::size_t) noexcept { return 0; }
inline std::size_t scale(float16*, float, std::size_t) noexcept { return 0; }

#endif

}  // namespace bps::reduce::f16c
