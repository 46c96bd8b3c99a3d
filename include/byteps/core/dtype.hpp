#pragma once
/// @file
/// Element types that byteps can carry, and the two 16-bit float types that C++20 lacks.
///
/// The hot path is type-erased: buffers travel as bytes plus a `bps::dtype` tag, and the
/// reducer dispatches on the tag once per buffer (see reduce/reducer.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace bps {

/// Wire values are part of the protocol: never renumber.
enum class dtype : std::uint8_t {
  float32 = 0,
  float64 = 1,
  float16 = 2,
  bfloat16 = 3,
  int8 = 4,
  uint8 = 5,
  int32 = 6,
  int64 = 7,
};

inline constexpr dtype all_dtypes[] = {dtype::float32, dtype::float64, dtype::float16,
                                       dtype::bfloat16, dtype::int8,    dtype::uint8,
                                       dtype::int32,   dtype::int64};

/// IEEE 754 binary16, stored as its bit pattern.
struct float16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(float16, float16) = default;
};

/// bfloat16 (the upper half of a binary32), stored as its bit pattern.
struct bfloat16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(bfloat16, bfloat16) = default;
};

constexpr std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::float64:
    case dtype::int64:
      return 8;
    case dtype::float32:
    case dtype::int32:
      return 4;
    case dtype::float16:
    case dtype::bfloat16:
      return 2;
    case dtype::int8:
    case dtype::uint8:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::float32: return "float32";
    case dtype::float64: return "float64";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::int8: return "int8";
    case dtype::uint8: return "uint8";
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
  }
  return "unknown";
}

constexpr bool is_floating(dtype t) noexcept {
  return t == dtype::float32 || t == dtype::float64 || t == dtype::float16 ||
         t == dtype::bfloat16;
}

/// Decodes a wire value; nullopt for a value no known dtype has.
constexpr std::optional<dtype> dtype_from_wire(std::uint32_t v) noexcept {
  if (v > static_cast<std::uint32_t>(dtype::int64)) return std::nullopt;
  return static_cast<dtype>(v);
}

template <class T>
struct dtype_of;  // no definition: an unsupported element type fails to compile here
template <> struct dtype_of<float> { static constexpr dtype value = dtype::float32; };
template <> struct dtype_of<double> { static constexpr dtype value = dtype::float64; };
template <> struct dtype_of<float16> { static constexpr dtype value = dtype::float16; };
template <> struct dtype_of<bfloat16> { static constexpr dtype value = dtype::bfloat16; };
template <> struct dtype_of<std::int8_t> { static constexpr dtype value = dtype::int8; };
template <> struct dtype_of<std::uint8_t> { static constexpr dtype value = dtype::uint8; };
template <> struct dtype_of<std::int32_t> { static constexpr dtype value = dtype::int32; };
template <> struct dtype_of<std::int64_t> { static constexpr dtype value = dtype::int64; };

/// Element types accepted by the typed `push_pull` overloads.
template <class T>
concept element_type = requires { dtype_of<std::remove_cv_t<T>>::value; };

template <element_type T>
inline constexpr dtype dtype_v = dtype_of<std::remove_cv_t<T>>::value;

}  // namespace bps
