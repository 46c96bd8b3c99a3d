#pragma once
/// @file
/// A bit stream, most significant bit of each byte first, and the Elias-delta code of positive
/// integers over it: the stream of BytePS's dithering compressor (dithering.hpp).
///
/// Elias delta of x >= 1, with N = the bit length of x and L = the bit length of N minus 1:
/// L zero bits, then N in L + 1 bits, then the N - 1 bits of x below its leading 1, all most
/// significant first; 2L + N bits. 1 is "1", 2 is "0100", 17 is "001010001". Decoding accepts
/// values up to 2^64 - 1 (L <= 6, N <= 64) and refuses anything longer or past the stream's
/// end, naming the compressor.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>

#include "byteps/compress/byte_stream.hpp"

namespace bps::compress {

/// Writes bits into a span whose size the caller has bounded; overrunning it is a bug in that
/// bound, not bad input, hence `std::logic_error`.
class bit_writer {
 public:
  explicit bit_writer(std::span<std::byte> out) noexcept : out_(out) {}

  void put(bool bit) {
    const std::size_t byte = bits_ / 8;
    if (byte >= out_.size()) throw std::logic_error("bit_writer: past the bound of the stream");
    if (bits_ % 8 == 0) out_[byte] = std::byte{0};
    if (bit) out_[byte] |= std::byte{0x80} >> (bits_ % 8);
    ++bits_;
  }
  /// The low `count` bits of `v`, most significant first.
  void put_bits(std::uint64_t v, unsigned count) {
    for (unsigned i = count; i-- > 0;) put((v >> i) & 1u);
  }
  std::size_t bits() const noexcept { return bits_; }
  std::size_t bytes() const noexcept { return (bits_ + 7) / 8; }

 private:
  std::span<std::byte> out_;
  std::size_t bits_ = 0;
};

/// Reads the first `bits` bits of a span (which must hold them); reading past them is
/// `malformed`.
class bit_reader {
 public:
  bit_reader(std::string_view compressor, std::span<const std::byte> in, std::size_t bits) noexcept
      : compressor_(compressor), in_(in), end_(bits) {}

  bool get() {
    if (pos_ >= end_) malformed(compressor_, "the bit stream ends inside a value");
    const bool bit = (std::to_integer<unsigned>(in_[pos_ / 8]) << (pos_ % 8)) & 0x80u;
    ++pos_;
    return bit;
  }
  std::uint64_t get_bits(unsigned count) {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < count; ++i) v = (v << 1) | static_cast<std::uint64_t>(get());
    return v;
  }
  std::size_t position() const noexcept { return pos_; }
  bool done() const noexcept { return pos_ == end_; }
  std::string_view compressor() const noexcept { return compressor_; }

 private:
  std::string_view compressor_;
  std::span<const std::byte> in_;
  std::size_t end_;
  std::size_t pos_ = 0;
};

/// The length of x's Elias-delta code in bits; x >= 1.
constexpr unsigned elias_delta_bits(std::uint64_t x) noexcept {
  const auto n = static_cast<unsigned>(std::bit_width(x));
  const auto l = static_cast<unsigned>(std::bit_width(n)) - 1;
  return 2 * l + n;
}

/// Writes x >= 1 (0 has no code: a logic error).
inline void put_elias_delta(bit_writer& w, std::uint64_t x) {
  if (x == 0) throw std::logic_error("elias delta: 0 has no code");
  const auto n = static_cast<unsigned>(std::bit_width(x));
  const auto l = static_cast<unsigned>(std::bit_width(n)) - 1;
  w.put_bits(0, l);
  w.put_bits(n, l + 1);
  w.put_bits(x, n - 1);
}

inline std::uint64_t get_elias_delta(bit_reader& r) {
  unsigned l = 0;
  while (!r.get()) {
    if (++l > 6) malformed(r.compressor(), "an Elias-delta code longer than 64 bits");
  }
  const std::uint64_t n = (std::uint64_t{1} << l) | r.get_bits(l);
  if (n > 64) malformed(r.compressor(), "an Elias-delta code longer than 64 bits");
  const auto low = static_cast<unsigned>(n - 1);  // at most 63
  return (std::uint64_t{1} << low) | r.get_bits(low);
}

}  // namespace bps::compress
