#pragma once
// Test values that every dtype holds exactly, and whose sums over a few workers it holds too,
// so that every result can be compared with the reference sum exactly.
#include <byteps/core/dtype.hpp>
#include <byteps/reduce/half.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

namespace bps::test {

/// Worker `w`'s element `i` in round `r`: a small integer (0..10 for unsigned, -5..5 otherwise).
inline std::int64_t value_at(dtype t, std::size_t i, int w, int r) {
  auto v = static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(w) * 3 + static_cast<std::size_t>(r)) % 11);
  return t == dtype::uint8 ? v : v - 5;
}

inline void store(dtype t, std::byte* p, std::size_t i, std::int64_t v) {
  switch (t) {
    case dtype::float32: { float x = static_cast<float>(v); std::memcpy(p + 4 * i, &x, 4); break; }
    case dtype::float64: { double x = static_cast<double>(v); std::memcpy(p + 8 * i, &x, 8); break; }
    case dtype::float16: { auto x = to_float16(static_cast<float>(v)); std::memcpy(p + 2 * i, &x, 2); break; }
    case dtype::bfloat16: { auto x = to_bfloat16(static_cast<float>(v)); std::memcpy(p + 2 * i, &x, 2); break; }
    case dtype::int8: { auto x = static_cast<std::int8_t>(v); std::memcpy(p + i, &x, 1); break; }
    case dtype::uint8: { auto x = static_cast<std::uint8_t>(v); std::memcpy(p + i, &x, 1); break; }
    case dtype::int32: { auto x = static_cast<std::int32_t>(v); std::memcpy(p + 4 * i, &x, 4); break; }
    case dtype::int64: { std::memcpy(p + 8 * i, &v, 8); break; }
  }
}

/// The element as a double (every value used here converts exactly).
inline double load(dtype t, const std::byte* p, std::size_t i) {
  switch (t) {
    case dtype::float32: { float x; std::memcpy(&x, p + 4 * i, 4); return x; }
    case dtype::float64: { double x; std::memcpy(&x, p + 8 * i, 8); return x; }
    case dtype::float16: { float16 x; std::memcpy(&x, p + 2 * i, 2); return to_float(x); }
    case dtype::bfloat16: { bfloat16 x; std::memcpy(&x, p + 2 * i, 2); return to_float(x); }
    case dtype::int8: { std::int8_t x; std::memcpy(&x, p + i, 1); return x; }
    case dtype::uint8: { std::uint8_t x; std::memcpy(&x, p + i, 1); return x; }
    case dtype::int32: { std::int32_t x; std::memcpy(&x, p + 4 * i, 4); return x; }
    case dtype::int64: { std::int64_t x; std::memcpy(&x, p + 8 * i, 8); return static_cast<double>(x); }
  }
  return 0;
}

inline std::vector<std::byte> fill(dtype t, std::size_t count, int w, int r) {
  std::vector<std::byte> b(count * dtype_size(t));
  for (std::size_t i = 0; i < count; ++i) store(t, b.data(), i, value_at(t, i, w, r));
  return b;
}

/// Index of the first element that differs from the sum over `workers`, or `count` if none.
inline std::size_t first_wrong(dtype t, const std::vector<std::byte>& b, std::size_t count,
                               int workers, int r) {
  for (std::size_t i = 0; i < count; ++i) {
    std::int64_t expect = 0;
    for (int w = 0; w < workers; ++w) expect += value_at(t, i, w, r);
    if (load(t, b.data(), i) != static_cast<double>(expect)) return i;
  }
  return count;
}

}  // namespace bps::test
