#pragma once
// Helpers for test_compressors.cpp: run a compressor over a vector, and small references for
// the algorithms, written from their definitions (not from the headers' loops) so that a
// mistake there is not mirrored here.

#include <algorithm>
#include <bit>
#include <byteps/compress/compressor.hpp>
#include <byteps/core/dtype.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace compress_test {

using bytes = std::vector<std::byte>;

template <class T>
bytes bytes_of(const std::vector<T>& v) {
  bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
std::vector<T> values_of(const bytes& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

/// Encodes `in` (elements of `t`) and returns exactly the bytes written, checking that they fit
/// max_encoded_bytes.
template <class C>
bytes encode(C& c, const bytes& in, bps::dtype t = bps::dtype::float32) {
  bytes out(c.max_encoded_bytes(in.size(), t));
  const std::size_t n = c.encode(in, t, out);
  REQUIRE(n <= out.size());
  out.resize(n);
  return out;
}

template <class C>
bytes decode(C& c, const bytes& in, std::size_t tensor_bytes, bps::dtype t = bps::dtype::float32) {
  bytes out(tensor_bytes, std::byte{0x5a});  // garbage: decode must write every element
  c.decode(in, t, out);
  return out;
}

template <class C>
std::vector<float> round_trip(C& c, const std::vector<float>& x) {
  const auto enc = encode(c, bytes_of(x));
  return values_of<float>(decode(c, enc, x.size() * 4));
}

/// The message of the exception `f` throws as E; fails the test if it throws nothing.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("no exception");
  return {};
}

inline std::uint32_t le32(const bytes& b, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v |= std::to_integer<std::uint32_t>(b.at(at + i)) << (8 * i);
  return v;
}
inline float lef32(const bytes& b, std::size_t at) {
  return std::bit_cast<float>(le32(b, at));
}

inline void put32(bytes& b, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
inline void putf32(bytes& b, float v) {
  put32(b, std::bit_cast<std::uint32_t>(v));
}

/// The (index, value) pairs of a sparse stream (topk, randomk), by the documented format.
struct pair {
  std::uint32_t index;
  float value;
  friend bool operator==(const pair&, const pair&) = default;
};
inline std::vector<pair> pairs_of(const bytes& b) {
  std::vector<pair> p(le32(b, 0));
  REQUIRE(b.size() == 4 + 8 * p.size());
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = {le32(b, 4 + 8 * i), lef32(b, 8 + 8 * i)};
  return p;
}
inline bytes sparse_stream(const std::vector<pair>& p) {
  bytes b;
  put32(b, static_cast<std::uint32_t>(p.size()));
  for (auto [i, v] : p) {
    put32(b, i);
    putf32(b, v);
  }
  return b;
}

/// xorshift128+ as BytePS seeds it (both words = seed), from its published definition.
struct xorshift_ref {
  std::uint64_t a, b;
  explicit xorshift_ref(std::uint64_t seed) : a(seed), b(seed) {}
  std::uint64_t next() {
    std::uint64_t t = a;
    const std::uint64_t s = b;
    a = s;
    t ^= t << 23;
    t ^= t >> 17;
    t ^= s ^ (s >> 26);
    b = t;
    return t + s;
  }
};

}  // namespace compress_test
