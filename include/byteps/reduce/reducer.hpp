#pragma once
/// @file
/// The elementwise kernels behind summation: the server's accumulator and the worker's local
/// sum and average.
///
/// Buffers are type-erased (bytes plus a `bps::dtype` tag) because tensors of every dtype share
/// one queue, one wire format and one server loop. Each entry point dispatches on the tag once
/// per buffer and then runs a tight loop for that element type, so the per-element cost is the
/// same as hand-written typed code and the loops stay simple enough for GCC to vectorise.
///
/// Numerical contract:
/// - fp16 and bf16 are accumulated in fp32 and rounded once at the end (`accumulate_*`), so the
///   result does not depend on how many workers contributed rounding steps; `sum_into` (two
///   buffers, no accumulator) widens, adds in fp32 and rounds once per call.
/// - Integer sums wrap modulo 2^bits, as two's complement hardware does, without undefined
///   behaviour: the addition is done in the unsigned type of the same width.
///
/// Preconditions common to every function: pointers are aligned for their element type (the
/// accumulator of an fp16/bf16 tensor for `float`), and the buffers do not overlap, except where
/// a function says otherwise.

#include <byteps/core/dtype.hpp>
#include <byteps/core/error.hpp>
#include <byteps/reduce/half.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "byteps/core/linkage.hpp"

namespace bps::reduce {

namespace detail {

[[noreturn]] inline void throw_unknown_dtype(dtype t) {
  throw usage_error("bps::reduce: unknown dtype wire value " +
                    std::to_string(static_cast<unsigned>(t)));
}

/// Signed overflow is undefined behaviour, so integers are added as their unsigned twins, which
/// wrap by definition; converting back is modular since C++20.
template <class T>
constexpr T wrapping_add(T a, T b) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <class T>
inline void add_n(T* __restrict dst, const T* __restrict src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = wrapping_add(dst[i], src[i]);
}

/// out = a + b in one pass (the first two inputs of `sum_of`: no copy of `a` first).
template <class T>
inline void add_pair_n(T* __restrict out, const T* __restrict a, const T* __restrict b,
                       std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = wrapping_add(a[i], b[i]);
}

/// out = ((a + b) + c) and out = (((a + b) + c) + d) in one pass: `sum_of` reads each input once
/// and writes the sum once, where adding one input at a time passes over the sum per input.
/// The additions keep their order, so the bits are those of adding one at a time.
template <class T>
inline void add_three_n(T* __restrict out, const T* __restrict a, const T* __restrict b,
                        const T* __restrict c, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = wrapping_add(wrapping_add(a[i], b[i]), c[i]);
}

template <class T>
inline void add_four_n(T* __restrict out, const T* __restrict a, const T* __restrict b,
                       const T* __restrict c, const T* __restrict d, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = wrapping_add(wrapping_add(wrapping_add(a[i], b[i]), c[i]), d[i]);
}

/// dst = (dst + a) + b and dst = ((dst + a) + b) + c: the same for the inputs after the first
/// four, or after the first when the sum is taken in place.
template <class T>
inline void add_two_into_n(T* __restrict dst, const T* __restrict a, const T* __restrict b,
                           std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = wrapping_add(wrapping_add(dst[i], a[i]), b[i]);
}

template <class T>
inline void add_three_into_n(T* __restrict dst, const T* __restrict a, const T* __restrict b,
                             const T* __restrict c, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    dst[i] = wrapping_add(wrapping_add(wrapping_add(dst[i], a[i]), b[i]), c[i]);
}

/// fp32 accumulator += widened half source.
template <class H>
inline void add_widened_n(float* __restrict acc, const H* __restrict src, std::size_t n) noexcept {
  std::size_t i = 0;
  if constexpr (std::is_same_v<H, float16>)
    if (f16c::has_f16c()) i = f16c::add_widened(acc, src, n);
  for (; i < n; ++i) acc[i] += to_float(src[i]);
}

inline float16 from_float(float f, float16) noexcept {
  return to_float16(f);
}
inline bfloat16 from_float(float f, bfloat16) noexcept {
  return to_bfloat16(f);
}

/// Half-precision dst += src with a single rounding per element.
template <class H>
inline void add_half_n(H* __restrict dst, const H* __restrict src, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = from_float(to_float(dst[i]) + to_float(src[i]), H{});
}

template <class T>
inline void scale_n(T* __restrict data, std::size_t n, T factor) noexcept {
  for (std::size_t i = 0; i < n; ++i) data[i] *= factor;
}

template <class H>
inline void scale_half_n(H* __restrict data, std::size_t n, float factor) noexcept {
  std::size_t i = 0;
  if constexpr (std::is_same_v<H, float16>)
    if (f16c::has_f16c()) i = f16c::scale(data, factor, n);
  for (; i < n; ++i) data[i] = from_float(to_float(data[i]) * factor, H{});
}

/// Narrowing in place (out == acc) is safe front to back, because element i is written to bytes
/// [2i, 2i+2) only after bytes [4i, 4i+4) were read; but `__restrict` loops may not see the
/// buffers alias. Going through a small stack block keeps both loops restrict-clean.
template <class H>
inline void narrow_in_place(float* acc, std::size_t n) noexcept {
  constexpr std::size_t block = 512;
  H tmp[block];
  auto* out = reinterpret_cast<unsigned char*>(acc);
  for (std::size_t done = 0; done < n; done += block) {
    const std::size_t len = n - done < block ? n - done : block;
    narrow_from_f32(acc + done, tmp, len);
    std::memcpy(out + done * sizeof(H), tmp, len * sizeof(H));
  }
}

/// Calls `f(std::type_identity<T>{})` with the C++ element type of `t`: the one switch over
/// dtypes that the kernels below share.
template <class F>
inline void visit_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::float32:
      return f(std::type_identity<float>{});
    case dtype::float64:
      return f(std::type_identity<double>{});
    case dtype::float16:
      return f(std::type_identity<float16>{});
    case dtype::bfloat16:
      return f(std::type_identity<bfloat16>{});
    case dtype::int8:
      return f(std::type_identity<std::int8_t>{});
    case dtype::uint8:
      return f(std::type_identity<std::uint8_t>{});
    case dtype::int32:
      return f(std::type_identity<std::int32_t>{});
    case dtype::int64:
      return f(std::type_identity<std::int64_t>{});
  }
  throw_unknown_dtype(t);
}

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

}  // namespace detail

/// Bytes of the server-side accumulator for `count` elements of `t`: fp16 and bf16 widen to
/// fp32 so that rounding happens once, every other dtype accumulates in itself.
constexpr std::size_t accumulator_bytes(dtype t, std::size_t count) noexcept {
  if (t == dtype::float16 || t == dtype::bfloat16) return count * sizeof(float);
  return count * dtype_size(t);
}

/// acc = src, widening fp16/bf16 into the fp32 accumulator. `acc` holds
/// `accumulator_bytes(t, count)` bytes.
BYTEPS_DECL void accumulate_init(void* acc, const void* src, std::size_t count, dtype t);

/// acc += src; fp16/bf16 sources are widened and added in fp32.
BYTEPS_DECL void accumulate_add(void* acc, const void* src, std::size_t count, dtype t);

/// out = acc in the tensor's dtype: fp32 -> fp16/bf16 rounds to nearest even, other dtypes are
/// copied. `out == acc` is allowed for every dtype (the server may hand the accumulator out as
/// the reply); any other overlap is not.
BYTEPS_DECL void accumulate_finish(void* out, const void* acc, std::size_t count, dtype t);

/// dst += src in the tensor's own dtype (no separate accumulator); fp16/bf16 are widened, added
/// in fp32 and rounded once per call.
BYTEPS_DECL void sum_into(void* dst, const void* src, std::size_t count, dtype t);

/// data *= factor, for averaging. fp32 multiplies by `static_cast<float>(factor)` so that it
/// stays a single-precision loop; fp16/bf16 go through fp32 and round once.
/// @throws bps::usage_error for an integer dtype: an integer mean would silently truncate.
BYTEPS_DECL void scale(void* data, std::size_t count, dtype t, double factor);

/// Fills `count` elements with the additive identity that keeps every value's bits: -0.0 for
/// floating dtypes (x + -0.0 == x for x = -0.0 too, where +0.0 would give +0.0), 0 otherwise.
/// Broadcast sends this from non-root workers.
BYTEPS_DECL void fill_negative_zero(void* data, std::size_t count, dtype t);

/// out = the sum of `inputs` (each `count` elements of `t`), added in the inputs' order so
/// that every machine gets the same bits. fp16/bf16 accumulate in fp32 and round once, as
/// `accumulate_*` do. One pass over memory reads each input once and writes the sum once (up to
/// four inputs; three more per further pass). `out` may be one of the inputs only if it is the
/// first.
BYTEPS_DECL void sum_of(void* out, std::span<const std::byte* const> inputs, std::size_t count,
                        dtype t);

}  // namespace bps::reduce

#if BYTEPS_INCLUDE_BODIES
#include "byteps/reduce/impl/reducer.hpp"
#endif
