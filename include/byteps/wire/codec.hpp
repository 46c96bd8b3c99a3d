#pragma once
/// @file
/// Little-endian writer and bounds-checked reader for the payloads of control messages
/// (rendezvous). A reader never reads past its span: a short or hostile payload throws
/// `wire::decode_error`, which the receiver turns into a dropped connection.

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "byteps/wire/frame.hpp"

namespace bps::wire {

class decode_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class byte_writer {
 public:
  template <class T>
    requires std::is_integral_v<T>
  void put(T v) {
    std::byte b[sizeof(T)];
    detail::put_le<std::make_unsigned_t<T>>(b, static_cast<std::make_unsigned_t<T>>(v));
    bytes_.insert(bytes_.end(), b, b + sizeof(T));
  }
  /// A flag as one byte, 0 or 1 (`byte_reader::get_flag`).
  void put_flag(bool on) { put(static_cast<std::uint8_t>(on ? 1 : 0)); }
  void put_string(std::string_view s) {
    put<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
    auto p = as_bytes(s);
    bytes_.insert(bytes_.end(), p.begin(), p.end());
  }
  std::vector<std::byte>& bytes() noexcept { return bytes_; }
  std::vector<std::byte> take() noexcept { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

class byte_reader {
 public:
  explicit byte_reader(std::span<const std::byte> in) noexcept : in_(in) {}

  template <class T>
    requires std::is_integral_v<T>
  T get() {
    need(sizeof(T));
    auto v = detail::get_le<std::make_unsigned_t<T>>(in_.data() + pos_);
    pos_ += sizeof(T);
    return static_cast<T>(v);
  }
  /// A flag written by `put_flag`; any byte but 0 or 1 throws, naming the flag (`what`).
  bool get_flag(std::string_view what) {
    const auto v = get<std::uint8_t>();
    if (v > 1) throw decode_error(std::string(what) + " flag is neither 0 nor 1");
    return v == 1;
  }
  std::string get_string(std::size_t max_len = 4096) {
    auto n = get<std::uint32_t>();
    if (n > max_len) throw decode_error("string field longer than " + std::to_string(max_len));
    need(n);
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  /// The next `n` bytes as they are.
  std::span<const std::byte> get_span(std::size_t n) {
    need(n);
    auto s = in_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const noexcept { return pos_ == in_.size(); }
  std::size_t remaining() const noexcept { return in_.size() - pos_; }

 private:
  void need(std::size_t n) const {
    if (in_.size() - pos_ < n) throw decode_error("payload ends early");
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

}  // namespace bps::wire
