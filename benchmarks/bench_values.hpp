#pragma once
// Test values whose sums every dtype holds exactly, so a benchmark checks its results bit for
// bit at memcpy speed. Part of common.hpp.
#include <byteps/core/dtype.hpp>
#include <byteps/reduce/half.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
namespace bench {

// ---------------------------------------------------------------- test values

/// Rank w's element i in iteration r: ((7i + 3w + r) mod 11) - 5, or without the -5 for uint8.
/// Small integers: every dtype holds them and their sums over the workers exactly (fp16 up to
/// 409 workers, bf16 up to 51; int8/uint8 sums wrap, as the reference does), so a result is
/// right only if it is bit for bit the reference. The pattern repeats every 11 elements, so a
/// tile of 11 x 1024 elements is built once and copied (fill and check run at memcpy speed).
class values {
 public:
  static constexpr std::size_t period = 11 * 1024;

  values(bps::dtype t, int workers) : type_(t), size_(bps::dtype_size(t)), workers_(workers) {}

  /// Writes rank `w`'s contribution for iteration `r` into `count` elements at `dst`.
  void fill(void* dst, std::size_t count, int w, int r) {
    copy_tiled(static_cast<std::byte*>(dst), count, tile(false, w, r));
  }

  /// Number of elements at `got` that are not bit for bit the sum over all workers.
  std::size_t count_wrong(const void* got, std::size_t count, int r) {
    const auto& t = tile(true, 0, r);
    const auto* g = static_cast<const std::byte*>(got);
    std::size_t wrong = 0;
    for (std::size_t done = 0; done < count; done += period) {
      const std::size_t n = std::min(period, count - done);
      const std::byte* chunk = g + done * size_;
      if (std::memcmp(chunk, t.data(), n * size_) == 0) continue;
      for (std::size_t i = 0; i < n; ++i)
        if (std::memcmp(chunk + i * size_, t.data() + i * size_, size_) != 0) ++wrong;
    }
    return wrong;
  }

 private:
  static std::int64_t value(bps::dtype t, std::size_t i, int w, int r) {
    auto v = static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(w) * 3 +
                                        static_cast<std::size_t>(r)) % 11);
    return t == bps::dtype::uint8 ? v : v - 5;
  }

  static void store(bps::dtype t, std::byte* p, std::int64_t v) {
    switch (t) {
      case bps::dtype::float32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
      case bps::dtype::float64: { double x = static_cast<double>(v); std::memcpy(p, &x, 8); break; }
      case bps::dtype::float16: { auto x = bps::to_float16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
      case bps::dtype::bfloat16: { auto x = bps::to_bfloat16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
      // Integer sums wrap modulo 2^bits: the conversion from int64 is modular (C++20).
      case bps::dtype::int8: { auto x = static_cast<std::int8_t>(v); std::memcpy(p, &x, 1); break; }
      case bps::dtype::uint8: { auto x = static_cast<std::uint8_t>(v); std::memcpy(p, &x, 1); break; }
      case bps::dtype::int32: { auto x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); break; }
      case bps::dtype::int64: { std::memcpy(p, &v, 8); break; }
    }
  }

  // expected: the sum over all workers; else rank w's values. A tile per kind and iteration
  // modulo 11, each built once: rebuilding one every iteration cost about 27 us of CPU per
  // rank and iteration (loopback 4 KiB), taken on a small machine from the ranks still timed.
  const std::vector<std::byte>& tile(bool expected, int w, int r) {
    const int rr = r % 11;
    const int ww = expected ? -1 : w;
    auto& cache = cache_[expected ? 1 : 0][rr];
    auto& owner = cache_rank_[expected ? 1 : 0][rr];
    if (owner != ww || cache.empty()) {
      cache.assign(period * size_, std::byte{0});
      for (std::size_t i = 0; i < period; ++i) {
        std::int64_t v = 0;
        if (expected) {
          for (int k = 0; k < workers_; ++k) v += value(type_, i, k, rr);
        } else {
          v = value(type_, i, w, rr);
        }
        store(type_, cache.data() + i * size_, v);
      }
      owner = ww;
    }
    return cache;
  }

  void copy_tiled(std::byte* dst, std::size_t count, const std::vector<std::byte>& t) const {
    for (std::size_t done = 0; done < count; done += period)
      std::memcpy(dst + done * size_, t.data(), std::min(period, count - done) * size_);
  }

  bps::dtype type_;
  std::size_t size_;
  int workers_;
  std::vector<std::byte> cache_[2][11];  // [expected][iteration % 11]
  int cache_rank_[2][11]{};               // whose values each tile holds (-1: the sum)
};

}  // namespace bench
