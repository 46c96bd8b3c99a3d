#pragma once
/// @file
/// A tensor's elements as fp32, whatever its floating dtype: how the built-in compressors stay
/// type-erased. Each compressor computes on fp32 values only, so its encoded stream depends on
/// the element count and those values, never on the dtype: float32 is read as it is, float64
/// is rounded to fp32 (its extra precision is not sent), float16 and bfloat16 are widened
/// exactly (reduce/half.hpp). Decoded fp32 values are written back in the tensor's dtype
/// (float64 exactly, float16/bfloat16 rounded to nearest even). Integer dtypes are refused:
/// BytePS compresses float tensors only, and a sign or a level means nothing for an integer.

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
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

template <class T, class Convert>
void widen_each(const std::byte* in, float* out, std::size_t n, Convert convert) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, in + i * sizeof(T), sizeof(T));  // the tensor's bytes need not be aligned
    out[i] = convert(v);
  }
}

template <class T, class Convert>
void narrow_each(const float* in, std::byte* out, std::size_t n, Convert convert) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const T v = convert(in[i]);
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
  switch (type) {
    case dtype::float32:
      std::memcpy(scratch.data(), in.data(), n * sizeof(float));
      break;
    case dtype::float64:
      detail::widen_each<double>(in.data(), scratch.data(), n,
                                 [](double v) { return static_cast<float>(v); });
      break;
    case dtype::float16:
      detail::widen_each<float16>(in.data(), scratch.data(), n,
                                  [](float16 v) { return to_float(v); });
      break;
    case dtype::bfloat16:
      detail::widen_each<bfloat16>(in.data(), scratch.data(), n,
                                   [](bfloat16 v) { return to_float(v); });
      break;
    default:
      break;  // refused by float_elements before any compressor gets here
  }
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
  switch (type) {
    case dtype::float32:
      std::memcpy(out.data(), values.data(), n * sizeof(float));
      break;
    case dtype::float64:
      detail::narrow_each<double>(values.data(), out.data(), n,
                                  [](float v) { return static_cast<double>(v); });
      break;
    case dtype::float16:
      detail::narrow_each<float16>(values.data(), out.data(), n,
                                   [](float v) { return to_float16(v); });
      break;
    case dtype::bfloat16:
      detail::narrow_each<bfloat16>(values.data(), out.data(), n,
                                    [](float v) { return to_bfloat16(v); });
      break;
    default:
      break;
  }
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
