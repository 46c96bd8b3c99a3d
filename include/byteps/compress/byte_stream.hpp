#pragma once
/// @file
/// Little-endian fields of an encoded stream, written into the caller's span and read back with
/// bounds checks. A server decodes bytes that came off the network, so a reader never reads
/// past its span: a short, long or inconsistent stream is a `usage_error` that names the
/// compressor and what is wrong, never an out-of-bounds read.

#include <fmt/core.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "byteps/core/error.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::compress {

/// Throws the error for a stream that `compressor` cannot decode.
[[noreturn]] inline void malformed(std::string_view compressor, std::string_view what) {
  throw usage_error(fmt::format(
      "compressor '{}': malformed encoded stream: {}; it was not made by this compressor with "
      "the same parameters for a tensor of this size, or it was cut or corrupted in transit",
      compressor, what));
}

/// Throws unless `out` has room for `needed` bytes (`max_encoded_bytes`).
inline void require_room(std::string_view compressor, std::size_t have, std::size_t needed) {
  if (have < needed)
    throw usage_error(fmt::format(
        "compressor '{}': encode needs an output of max_encoded_bytes = {} bytes, got {}",
        compressor, needed, have));
}

/// Throws unless a decode's output holds the tensor's `bytes` (decode's `out` must be the
/// partition's full size).
inline void require_size(std::string_view compressor, std::string_view what, std::size_t have,
                         std::size_t expected) {
  if (have != expected)
    malformed(compressor, fmt::format("{}: {} bytes, expected {}", what, have, expected));
}

/// Writes fields one after another; the caller has checked the room (`require_room`).
class stream_writer {
 public:
  explicit stream_writer(std::span<std::byte> out) noexcept : out_(out) {}
  void put_u32(std::uint32_t v) noexcept {
    wire::detail::put_le<std::uint32_t>(out_.data() + pos_, v);
    pos_ += 4;
  }
  void put_f32(float v) noexcept { put_u32(std::bit_cast<std::uint32_t>(v)); }
  void put_u16(std::uint16_t v) noexcept {
    wire::detail::put_le<std::uint16_t>(out_.data() + pos_, v);
    pos_ += 2;
  }
  /// The bytes not yet written, for a body written in place (packed bits).
  std::span<std::byte> rest() const noexcept { return out_.subspan(pos_); }
  void advance(std::size_t n) noexcept { pos_ += n; }
  std::size_t written() const noexcept { return pos_; }

 private:
  std::span<std::byte> out_;
  std::size_t pos_ = 0;
};

/// Reads fields one after another; running out is `malformed`.
class stream_reader {
 public:
  stream_reader(std::string_view compressor, std::span<const std::byte> in) noexcept
      : compressor_(compressor), in_(in) {}
  std::uint32_t get_u32() {
    need(4, "a 4-byte field");
    const auto v = wire::detail::get_le<std::uint32_t>(in_.data() + pos_);
    pos_ += 4;
    return v;
  }
  float get_f32() { return std::bit_cast<float>(get_u32()); }
  std::uint16_t get_u16() {
    need(2, "a 2-byte field");
    const auto v = wire::detail::get_le<std::uint16_t>(in_.data() + pos_);
    pos_ += 2;
    return v;
  }
  std::span<const std::byte> rest() const noexcept { return in_.subspan(pos_); }
  std::size_t remaining() const noexcept { return in_.size() - pos_; }
  std::size_t position() const noexcept { return pos_; }

 private:
  void need(std::size_t n, std::string_view what) const {
    if (remaining() < n)
      malformed(compressor_, fmt::format("it ends at byte {} where {} was due", in_.size(), what));
  }
  std::string_view compressor_;
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

}  // namespace bps::compress
