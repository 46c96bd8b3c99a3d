#pragma once
/// @file
/// `fp16` and `bf16`: a float32 tensor sent as 16-bit floats, half the bytes (BytePS's
/// `fp16` compression). Rounds to nearest even, exactly as reduce/half.hpp does; decoding is
/// exact. Only float32 tensors: a float16 or bfloat16 tensor is already that size, and a
/// float64 one would lose more than a cast promises; anything else is a `usage_error`.
///
/// Encoded format, n elements: n x u16, the IEEE binary16 (fp16) or bfloat16 (bf16) bit
/// pattern of each element, little-endian; 2n bytes exactly.

#include <fmt/core.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "byteps/compress/byte_stream.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/reduce/half.hpp"

namespace bps::compress {

template <class Half>
requires std::is_same_v<Half, float16> || std::is_same_v<Half, bfloat16>
class cast {
 public:
  std::string name() const { return std::string(name_); }

  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const {
    return elements(bytes, type) * 2;
  }

  std::size_t encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    const std::size_t n = elements(in.size(), type);
    require_room(name_, out.size(), n * 2);
    const auto x = read_floats(in, type, scratch_);
    stream_writer w(out);
    for (float v : x) w.put_u16(narrow(v).bits);
    return w.written();
  }

  void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    const std::size_t n = elements(out.size(), type);
    require_size(name_, "stream", in.size(), n * 2);
    decode_as_floats(name_, out, type, scratch_, [&](std::span<float> y) {
      stream_reader r(name_, in);
      for (float& v : y) v = to_float(Half{r.get_u16()});
    });
  }

 private:
  std::size_t elements(std::size_t bytes, dtype type) const {
    if (type != dtype::float32)
      throw usage_error(fmt::format(
          "compressor '{}': casts float32 tensors only, not {} (push this tensor without a "
          "compressor, or with another one)",
          name_, dtype_name(type)));
    return float_elements(name_, bytes, type);
  }
  static Half narrow(float v) noexcept {
    if constexpr (std::is_same_v<Half, float16>)
      return to_float16(v);
    else
      return to_bfloat16(v);
  }

  static constexpr std::string_view name_ = std::is_same_v<Half, float16> ? "fp16" : "bf16";
  std::vector<float> scratch_;  // unaligned input or output only
};

/// float32 sent as IEEE binary16.
using fp16 = cast<float16>;
/// float32 sent as bfloat16.
using bf16 = cast<bfloat16>;

}  // namespace bps::compress
