#pragma once
/// @file
/// `onebit`: one sign bit per element (signSGD), as BytePS's `onebit` compressor. Each element
/// is sent as its sign and decoded as +scale or -scale. With `scaling` (BytePS's
/// `compressor_onebit_scaling`, off by default) the scale is the mean of |x| over the
/// partition, summed in double in element order and rounded once to fp32; without it, 1.
/// Negative means x < 0, so -0 and NaN decode as +scale, as in BytePS.
///
/// Encoded format, n elements, little-endian:
///   [f32 scale][ceil(n/8) bytes: element i is bit (i % 8) of byte i / 8, least significant
///   bit first, 1 for negative; the padding bits of the last byte are 0]
/// 4 + ceil(n/8) bytes exactly. Decode refuses any other size and nonzero padding bits.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "byteps/compress/byte_stream.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/core/dtype.hpp"

namespace bps::compress {

class onebit {
 public:
  explicit onebit(bool scaling = false)
      : scaling_(scaling), name_(scaling ? "onebit(scaling=true)" : "onebit(scaling=false)") {}

  std::string name() const { return name_; }
  bool scaling() const noexcept { return scaling_; }

  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const {
    return encoded_bytes(float_elements(name_, bytes, type));
  }

  std::size_t encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    const std::size_t n = float_elements(name_, in.size(), type);
    require_room(name_, out.size(), encoded_bytes(n));
    const auto x = read_floats(in, type, scratch_);
    stream_writer w(out);
    w.put_f32(scale_of(x));
    std::byte* bits = w.rest().data();
    for (std::size_t b = 0; b < (n + 7) / 8; ++b) {
      unsigned byte = 0;
      const std::size_t end = b * 8 + 8 < n ? b * 8 + 8 : n;
      for (std::size_t i = b * 8; i < end; ++i) byte |= static_cast<unsigned>(x[i] < 0) << (i % 8);
      bits[b] = static_cast<std::byte>(byte);
    }
    w.advance((n + 7) / 8);
    return w.written();
  }

  void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    decode_as_floats(name_, out, type, scratch_, [&](std::span<float> y) {
      const std::size_t n = y.size();
      require_size(name_, "stream", in.size(), encoded_bytes(n));
      stream_reader r(name_, in);
      const float scale = r.get_f32();
      const std::byte* bits = r.rest().data();
      if (n % 8 != 0 && (std::to_integer<unsigned>(bits[n / 8]) >> (n % 8)) != 0)
        malformed(name_, "padding bits after the last element are set");
      for (std::size_t i = 0; i < n; ++i)
        y[i] = (std::to_integer<unsigned>(bits[i / 8]) >> (i % 8)) & 1u ? -scale : scale;
    });
  }

 private:
  static std::size_t encoded_bytes(std::size_t n) noexcept { return 4 + (n + 7) / 8; }

  float scale_of(std::span<const float> x) const noexcept {
    if (!scaling_ || x.empty()) return 1.0f;
    double sum = 0;
    for (float v : x) sum += std::fabs(static_cast<double>(v));
    return static_cast<float>(sum / static_cast<double>(x.size()));
  }

  bool scaling_;
  std::string name_;
  std::vector<float> scratch_;  // non-float32 or unaligned tensors only
};

}  // namespace bps::compress
