#pragma once
/// @file
/// A tensor's elements as fp32, whatever its floating dtype: how the built-in compressors stay
/// type-erased. Each compressor computes on fp32 values only, so its encoded stream depends on
/// the element count and those values, never on the dtype: float32 is read as it is, float64
/// is rounded to fp32 (its extra precision is not sent), float16 and bfloat16 are widened
/// exactly (reduce/half.hpp). Decoded fp32 values are written back in the tensor's dtype
/// (float64 exactly, float16/bfloat16 rounded to nearest even). Integer dtypes are refused:
/// BytePS compresses float tensors only, and a sign or a level means nothing for an integer.

#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/reduce/half.hpp"

namespace bps::compress {

/// The number of elements in `bytes` bytes of `type`; a usage error naming `compressor` if
/// `type` is not a floating dtype or `bytes` is not a whole number of elements.
inline std::size_t float_elements(std::string_view compressor, std::size_t bytes, dtype type) {
  if (!is_floating(type))
    throw usage_error(fmt::format(
        "compressor '{}': cannot compress a {} tensor; it compresses float32, float64, float16 "
        "and bfloat16 tensors only (push this tensor without a compressor)",
        compressor, dtype_name(type)));
  if (bytes % dtype_size(type) != 0)
    throw usage_error(fmt::format("compressor '{}': {} bytes is not a whole number of {} elements",
                                  compressor, bytes, dtype_name(type)));
  return bytes / dtype_size(type);
}

namespace detail {

template <class T>
bool aligned_for(const void* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(T) == 0;
}

// One element of a floating dtype as fp32, and back, rounded as the file comment says.
inline float to_fp32(float v) noexcept { return v; }
inline float to_fp32(double v) noexcept { return static_cast<float>(v); }
inline float to_fp32(float16 v) noexcept { return to_float(v); }
inline float to_fp32(bfloat16 v) noexcept { return to_float(v); }

template <class T>
T from_fp32(float v) noexcept {
  if constexpr (std::is_same_v<T, float16>)
    return to_float16(v);
  else if constexpr (std::is_same_v<T, bfloat16>)
    return to_bfloat16(v);
  else
    return static_cast<T>(v);
}

/// Calls `f(std::type_identity<T>{})` with the element type of a floating `type`, so that
/// reading and writing share one switch; does nothing for another dtype, which
/// `float_elements` refuses before any compressor gets here.
template <class F>
void visit_floating(dtype type, F&& f) {
  switch (type) {
    case dtype::float32: return f(std::type_identity<float>{});
    case dtype::float64: return f(std::type_identity<double>{});
    case dtype::float16: return f(std::type_identity<float16>{});
    case dtype::bfloat16: return f(std::type_identity<bfloat16>{});
    default: return;
  }
}

template <class T>
void widen_each(const std::byte* in, float* out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, in + i * sizeof(T), sizeof(T));  // the tensor's bytes need not be aligned
    out[i] = to_fp32(v);
  }
}

template <class T>
void narrow_each(const float* in, std::byte* out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const T v = from_fp32<T>(in[i]);
    std::memcpy(out + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace detail

/// The elements of `in` (a floating dtype, checked by `float_elements`) as fp32: a view of `in`
/// itself for aligned float32, else converted into `scratch`, which is resized to fit.
inline std::span<const float> read_floats(std::span<const std::byte> in, dtype type,
                                          std::vector<float>& scratch) {
  const std::size_t n = in.size() / dtype_size(type);
  if (type == dtype::float32 && detail::aligned_for<float>(in.data()))
    return {reinterpret_cast<const float*>(in.data()), n};
  scratch.resize(n);
  detail::visit_floating(type, [&]<class T>(std::type_identity<T>) {
    detail::widen_each<T>(in.data(), scratch.data(), n);
  });
  return scratch;
}

/// Where to decode fp32 values destined for `out`: `out` itself for aligned float32, else
/// `scratch`, resized to fit. `write_floats` then stores them in `out`'s dtype.
inline std::span<float> float_target(std::span<std::byte> out, dtype type,
                                     std::vector<float>& scratch) {
  const std::size_t n = out.size() / dtype_size(type);
  if (type == dtype::float32 && detail::aligned_for<float>(out.data()))
    return {reinterpret_cast<float*>(out.data()), n};
  scratch.resize(n);
  return scratch;
}

/// Stores `values` (from `float_target`) into `out` as `type`; nothing to do when they are
/// already there.
inline void write_floats(std::span<const float> values, dtype type, std::span<std::byte> out) {
  if (static_cast<const void*>(values.data()) == static_cast<const void*>(out.data())) return;
  // The same count, but bounded by `out` where the compiler can see it.
  const std::size_t n = std::min(values.size(), out.size() / dtype_size(type));
  detail::visit_floating(type, [&]<class T>(std::type_identity<T>) {
    detail::narrow_each<T>(values.data(), out.data(), n);
  });
}

/// Decodes into `out`, a tensor of `type`, through fp32, as every built-in decoder does:
/// `decode_into(y)` writes the tensor's elements as floats into `y` (`out` itself for aligned
/// float32, else `scratch`), which are then stored in `out`'s dtype. A dtype or size that is
/// not a whole floating tensor is a usage error naming `compressor`, before `decode_into` runs.
template <class DecodeInto>
void decode_as_floats(std::string_view compressor, std::span<std::byte> out, dtype type,
                      std::vector<float>& scratch, DecodeInto&& decode_into) {
  float_elements(compressor, out.size(), type);
  const std::span<float> y = float_target(out, type, scratch);
  decode_into(y);
  write_floats(y, type, out);
}

/// The bytes of fp32 values, for handing them to a compressor as a float32 tensor.
inline std::span<const std::byte> float_bytes(std::span<const float> v) noexcept {
  return std::as_bytes(v);
}

}  // namespace bps::compress
