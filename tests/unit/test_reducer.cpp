#include <byteps/reduce/reducer.hpp>

#include <byteps/reduce/half.hpp>

#include <catch2/catch.hpp>

#include "reference.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <iterator>
#include <span>
#include <vector>

// Reductions (accumulate, sum_into, scale) for every dtype, against reference.hpp and exact
// integer arithmetic.

namespace {

using bps::bfloat16;
using bps::dtype;
using bps::float16;
using bps_test::is_nan16;
using bps_test::mismatch;
using bps_test::ref_narrow;
using bps_test::ref_widen;
using bps_test::rng;

__extension__ typedef __int128 int128;

// ---- per-dtype worker contributions and the expected results --------------------------------

constexpr int fp32_shift = 6;   // fp32 values are k * 2^-6 with |k| <= 2^20: sums of 3 are exact
constexpr int fp64_shift = 10;  // fp64 values are k * 2^-10 with |k| <= 2^50: sums of 3 are exact

template <class T>
struct workers {
  std::vector<T> w[3];
  std::vector<T> accumulated;  // init(w0), add(w1), add(w2), finish
  std::vector<T> summed;       // w0, sum_into(w1), sum_into(w2)
};

template <class T>
T make_value(rng& r, std::size_t i, int worker, std::vector<std::int64_t>* exact) {
  if constexpr (std::is_integral_v<T>) {
    using lim = std::numeric_limits<T>;
    // Extremes on some lanes guarantee overflow in both directions; the rest is random bits.
    switch ((i + static_cast<std::size_t>(worker)) % 6) {
      case 0: return lim::max();
      case 1: return lim::min();
      default: return static_cast<T>(r.next());
    }
  } else if constexpr (std::is_same_v<T, float>) {
    const std::int64_t k = r.between(-(1 << 20), 1 << 20);
    exact->push_back(k);
    return std::ldexp(static_cast<float>(k), -fp32_shift);
  } else if constexpr (std::is_same_v<T, double>) {
    const std::int64_t k = r.between(-(std::int64_t{1} << 50), std::int64_t{1} << 50);
    exact->push_back(k);
    return std::ldexp(static_cast<double>(k), -fp64_shift);
  } else {
    // Any finite pattern on even lanes; on odd lanes a narrow exponent window so the three
    // values are comparable and their sums cancel and tie often.
    constexpr bool f16 = std::is_same_v<T, float16>;
    constexpr std::uint16_t exp_mask = f16 ? 0x7c00 : 0x7f80;
    constexpr int frac = f16 ? 10 : 7;
    auto b = static_cast<std::uint16_t>(r.next());
    if (i % 2 == 1) {
      const auto e = static_cast<std::uint16_t>(f16 ? r.between(12, 18) : r.between(124, 130));
      b = static_cast<std::uint16_t>((b & ~exp_mask) | (e << frac));
    }
    if ((b & exp_mask) == exp_mask) b = static_cast<std::uint16_t>(b & ~exp_mask);  // no inf/NaN
    return T{b};
  }
}

/// Sum modulo 2^bits of T, computed exactly in 128 bits and then reduced, independently of the
/// unsigned-wrap trick the reducer uses.
template <class T>
T ref_wrapped_sum(T a, T b, T c) {
  constexpr int bits = std::numeric_limits<T>::digits + (std::is_signed_v<T> ? 1 : 0);
  const int128 modulus = int128{1} << bits;
  int128 s = (int128{a} + int128{b} + int128{c}) % modulus;
  if (s < 0) s += modulus;
  if (std::is_signed_v<T> && s >= modulus / 2) s -= modulus;
  return static_cast<T>(s);
}

template <class T>
workers<T> make_workers(std::size_t count, std::uint64_t seed) {
  rng r{seed};
  workers<T> ws;
  std::vector<std::int64_t> exact[3];
  for (int k = 0; k < 3; ++k) {
    ws.w[k].reserve(count);
    for (std::size_t i = 0; i < count; ++i) ws.w[k].push_back(make_value<T>(r, i, k, &exact[k]));
  }
  for (std::size_t i = 0; i < count; ++i) {
    const T a = ws.w[0][i], b = ws.w[1][i], c = ws.w[2][i];
    if constexpr (std::is_integral_v<T>) {
      ws.accumulated.push_back(ref_wrapped_sum(a, b, c));
      ws.summed.push_back(ref_wrapped_sum(a, b, c));
    } else if constexpr (std::is_floating_point_v<T>) {
      const std::int64_t k = exact[0][i] + exact[1][i] + exact[2][i];
      const int shift = std::is_same_v<T, float> ? fp32_shift : fp64_shift;
      const T v = std::ldexp(static_cast<T>(k), -shift);
      ws.accumulated.push_back(v);
      ws.summed.push_back(v);
    } else {
      // Accumulator: widen each, sum in fp32 in worker order, round once.
      float s = ref_widen(a);
      s += ref_widen(b);
      s += ref_widen(c);
      ws.accumulated.push_back(ref_narrow(s, T{}));
      // sum_into rounds once per call.
      const T ab = ref_narrow(ref_widen(a) + ref_widen(b), T{});
      ws.summed.push_back(ref_narrow(ref_widen(ab) + ref_widen(c), T{}));
    }
  }
  return ws;
}

/// A buffer of `bytes` aligned for any element type the reducer handles.
struct raw_buffer {
  std::vector<std::uint64_t> storage;
  explicit raw_buffer(std::size_t bytes) : storage(bytes / 8 + 1) {}
  void* data() { return storage.data(); }
};

template <class T>
void check_reduction(std::size_t count) {
  const dtype t = bps::dtype_v<T>;
  INFO("dtype " << bps::dtype_name(t) << ", count " << count);
  const auto ws = make_workers<T>(count, 0x5eed0000u + count * 16 + static_cast<unsigned>(t));

  raw_buffer acc(bps::reduce::accumulator_bytes(t, count));
  bps::reduce::accumulate_init(acc.data(), ws.w[0].data(), count, t);
  bps::reduce::accumulate_add(acc.data(), ws.w[1].data(), count, t);
  bps::reduce::accumulate_add(acc.data(), ws.w[2].data(), count, t);

  std::vector<T> out(count);
  bps::reduce::accumulate_finish(out.data(), acc.data(), count, t);
  CHECK(mismatch(out, ws.accumulated) == "");

  // The server may reply straight from its accumulator.
  bps::reduce::accumulate_finish(acc.data(), acc.data(), count, t);
  CHECK(mismatch(static_cast<const T*>(acc.data()), ws.accumulated.data(), count) == "");

  std::vector<T> dst = ws.w[0];
  bps::reduce::sum_into(dst.data(), ws.w[1].data(), count, t);
  bps::reduce::sum_into(dst.data(), ws.w[2].data(), count, t);
  CHECK(mismatch(dst, ws.summed) == "");

  // Sources are read-only.
  const auto again = make_workers<T>(count, 0x5eed0000u + count * 16 + static_cast<unsigned>(t));
  for (int k = 0; k < 3; ++k) CHECK(mismatch(ws.w[k], again.w[k]) == "");
}

/// Runs `f.template operator()<T>()` for the element type of a runtime tag, so that a loop over
/// `bps::all_dtypes` reaches every typed check and a dtype added later fails loudly here.
template <class F>
void with_type(dtype t, F&& f) {
  switch (t) {
    case dtype::float32: return f.template operator()<float>();
    case dtype::float64: return f.template operator()<double>();
    case dtype::float16: return f.template operator()<float16>();
    case dtype::bfloat16: return f.template operator()<bfloat16>();
    case dtype::int8: return f.template operator()<std::int8_t>();
    case dtype::uint8: return f.template operator()<std::uint8_t>();
    case dtype::int32: return f.template operator()<std::int32_t>();
    case dtype::int64: return f.template operator()<std::int64_t>();
  }
  FAIL("test has no element type for dtype " << static_cast<int>(t));
}

constexpr std::size_t counts[] = {0, 1, 7, 1023, 4097};

}  // namespace

TEST_CASE("accumulator_bytes widens only the 16-bit floats", "[reduce]") {
  for (const dtype t : bps::all_dtypes) {
    INFO(bps::dtype_name(t));
    const std::size_t per = (t == dtype::float16 || t == dtype::bfloat16) ? 4 : bps::dtype_size(t);
    CHECK(bps::reduce::accumulator_bytes(t, 0) == 0);
    CHECK(bps::reduce::accumulator_bytes(t, 4097) == 4097 * per);
  }
  static_assert(bps::reduce::accumulator_bytes(dtype::bfloat16, 3) == 12);
}

TEST_CASE("three workers reduce exactly, for every dtype and awkward counts", "[reduce]") {
  for (const dtype t : bps::all_dtypes) {
    for (const std::size_t n : counts) {
      with_type(t, [n]<class T>() { check_reduction<T>(n); });
    }
  }
}

TEST_CASE("integer sums wrap modulo 2^bits", "[reduce]") {
  auto sum3 = []<class T>(T a, T b, T c) {
    const dtype t = bps::dtype_v<T>;
    T acc{};
    bps::reduce::accumulate_init(&acc, &a, 1, t);
    bps::reduce::accumulate_add(&acc, &b, 1, t);
    bps::reduce::accumulate_add(&acc, &c, 1, t);
    T out{};
    bps::reduce::accumulate_finish(&out, &acc, 1, t);
    T dst = a;
    bps::reduce::sum_into(&dst, &b, 1, t);
    bps::reduce::sum_into(&dst, &c, 1, t);
    CHECK(dst == out);
    return out;
  };
  CHECK(sum3(std::int8_t{100}, std::int8_t{100}, std::int8_t{100}) == std::int8_t{44});
  CHECK(sum3(std::int8_t{127}, std::int8_t{1}, std::int8_t{0}) == std::int8_t{-128});
  CHECK(sum3(std::int8_t{-128}, std::int8_t{-1}, std::int8_t{0}) == std::int8_t{127});
  CHECK(sum3(std::uint8_t{255}, std::uint8_t{2}, std::uint8_t{0}) == std::uint8_t{1});
  CHECK(sum3(std::int32_t{2147483647}, std::int32_t{1}, std::int32_t{0}) ==
        std::numeric_limits<std::int32_t>::min());
  constexpr auto i64max = std::numeric_limits<std::int64_t>::max();
  CHECK(sum3(i64max, i64max, std::int64_t{2}) == 0);
  CHECK(sum3(std::numeric_limits<std::int64_t>::min(), std::int64_t{-1}, std::int64_t{0}) ==
        i64max);
}

TEST_CASE("16-bit floats accumulate in fp32 and round once", "[reduce]") {
  // 2048 + 1 + 1: rounding after each step would give 2048 twice (ties to even), fp32 gives 2050.
  const float16 a = bps::to_float16(2048.0f), one = bps::to_float16(1.0f);
  float acc = 0;
  bps::reduce::accumulate_init(&acc, &a, 1, dtype::float16);
  bps::reduce::accumulate_add(&acc, &one, 1, dtype::float16);
  bps::reduce::accumulate_add(&acc, &one, 1, dtype::float16);
  CHECK(acc == 2050.0f);
  float16 out{};
  bps::reduce::accumulate_finish(&out, &acc, 1, dtype::float16);
  CHECK(out.bits == bps::to_float16(2050.0f).bits);

  float16 dst = a;
  bps::reduce::sum_into(&dst, &one, 1, dtype::float16);
  bps::reduce::sum_into(&dst, &one, 1, dtype::float16);
  CHECK(dst.bits == bps::to_float16(2048.0f).bits);
}

TEST_CASE("scale multiplies floating dtypes", "[reduce][scale]") {
  SECTION("float32 and float64 by exact factors, and float32 in single precision") {
    std::vector<float> f(1023);
    std::vector<double> d(1023);
    rng r{3};
    for (std::size_t i = 0; i < f.size(); ++i) {
      f[i] = static_cast<float>(r.between(-(1 << 22), 1 << 22));
      d[i] = static_cast<double>(r.between(-(std::int64_t{1} << 50), std::int64_t{1} << 50));
    }
    auto f_half = f, f_tenth = f;
    auto d_half = d, d_tenth = d;
    bps::reduce::scale(f_half.data(), f.size(), dtype::float32, 0.5);
    bps::reduce::scale(f_tenth.data(), f.size(), dtype::float32, 0.1);
    bps::reduce::scale(d_half.data(), d.size(), dtype::float64, 0.5);
    bps::reduce::scale(d_tenth.data(), d.size(), dtype::float64, 0.1);
    std::vector<float> want_fh(f.size()), want_ft(f.size());
    std::vector<double> want_dh(d.size()), want_dt(d.size());
    const float tenth = static_cast<float>(0.1);
    for (std::size_t i = 0; i < f.size(); ++i) {
      want_fh[i] = std::ldexp(f[i], -1);
      want_ft[i] = f[i] * tenth;
      want_dh[i] = std::ldexp(d[i], -1);
      want_dt[i] = d[i] * 0.1;
    }
    CHECK(mismatch(f_half, want_fh) == "");
    CHECK(mismatch(f_tenth, want_ft) == "");
    CHECK(mismatch(d_half, want_dh) == "");
    CHECK(mismatch(d_tenth, want_dt) == "");
  }

  SECTION("float16 and bfloat16, every pattern, through fp32 with one rounding") {
    for (const double factor : {0.5, 0.25, 2.0, -1.0, 1.0 / 3.0}) {
      INFO("factor " << factor);
      std::vector<float16> h(65536), want_h(65536);
      std::vector<bfloat16> b(65536), want_b(65536);
      for (std::uint32_t i = 0; i <= 0xffff; ++i) {
        h[i].bits = b[i].bits = static_cast<std::uint16_t>(i);
        const float ff = static_cast<float>(factor);
        want_h[i] = ref_narrow(ref_widen(h[i]) * ff, float16{});
        want_b[i] = ref_narrow(ref_widen(b[i]) * ff, bfloat16{});
      }
      bps::reduce::scale(h.data(), h.size(), dtype::float16, factor);
      bps::reduce::scale(b.data(), b.size(), dtype::bfloat16, factor);
      for (std::uint32_t i = 0; i <= 0xffff; ++i) {
        // NaN payloads are not part of the contract; NaN-ness is.
        if (is_nan16(want_h[i])) {
          h[i] = want_h[i] = float16{static_cast<std::uint16_t>(is_nan16(h[i]) ? 1 : 0)};
        }
        if (is_nan16(want_b[i])) {
          b[i] = want_b[i] = bfloat16{static_cast<std::uint16_t>(is_nan16(b[i]) ? 1 : 0)};
        }
      }
      CHECK(mismatch(h, want_h) == "");
      CHECK(mismatch(b, want_b) == "");
    }
  }

  SECTION("an empty buffer is fine") {
    bps::reduce::scale(nullptr, 0, dtype::float32, 0.5);
  }
}

TEST_CASE("scale refuses integer dtypes, naming them", "[reduce][scale]") {
  for (const dtype t : bps::all_dtypes) {
    if (bps::is_floating(t)) continue;
    const std::string name(bps::dtype_name(t));
    INFO(name);
    std::int64_t data[4] = {1, 2, 3, 4};
    CHECK_THROWS_AS(bps::reduce::scale(data, 4, t, 0.5), bps::usage_error);
    CHECK_THROWS_WITH(bps::reduce::scale(data, 4, t, 0.5),
                      Catch::Contains(name) && Catch::Contains("floating dtypes only"));
    CHECK(data[0] == 1);
  }
}

TEST_CASE("an unknown dtype tag is a usage error, not a silent no-op", "[reduce]") {
  const auto bogus = static_cast<dtype>(200);
  float a[2] = {1, 2}, b[2] = {3, 4};
  CHECK_THROWS_AS(bps::reduce::accumulate_init(a, b, 2, bogus), bps::usage_error);
  CHECK_THROWS_AS(bps::reduce::accumulate_add(a, b, 2, bogus), bps::usage_error);
  CHECK_THROWS_AS(bps::reduce::accumulate_finish(a, b, 2, bogus), bps::usage_error);
  CHECK_THROWS_AS(bps::reduce::sum_into(a, b, 2, bogus), bps::usage_error);
  CHECK_THROWS_AS(bps::reduce::scale(a, 2, bogus, 0.5), bps::usage_error);
}

TEST_CASE("sum_of adds the inputs in order, in place or not, for every dtype and awkward counts",
          "[reduce]") {
  // 49157 elements: more than a cache's worth for every element size, and an odd tail.
  std::vector<std::size_t> sizes(std::begin(counts), std::end(counts));
  sizes.push_back(3 * 16384 + 5);
  for (const dtype t : bps::all_dtypes) {
    for (const std::size_t n : sizes) {
      with_type(t, [n]<class T>() {
        const dtype tt = bps::dtype_v<T>;
        INFO("dtype " << bps::dtype_name(tt) << ", count " << n);
        const auto ws = make_workers<T>(n, 0x50f00000u + n * 16 + static_cast<unsigned>(tt));
        auto bytes = [](const std::vector<T>& v) {
          return reinterpret_cast<const std::byte*>(v.data());
        };
        std::vector<T> out(n);
        const std::byte* inputs[] = {bytes(ws.w[0]), bytes(ws.w[1]), bytes(ws.w[2])};
        bps::reduce::sum_of(out.data(), inputs, n, tt);
        CHECK(mismatch(out, ws.accumulated) == "");
        // Into the first input, as the local stage sums into its own segment.
        std::vector<T> first = ws.w[0];
        const std::byte* in_place[] = {bytes(first), bytes(ws.w[1]), bytes(ws.w[2])};
        bps::reduce::sum_of(first.data(), in_place, n, tt);
        CHECK(mismatch(first, ws.accumulated) == "");
        // Two inputs, and one (a copy).
        std::vector<T> two(n), one(n);
        bps::reduce::sum_of(two.data(), std::span(inputs, 2), n, tt);
        bps::reduce::sum_of(one.data(), std::span(inputs, 1), n, tt);
        CHECK(mismatch(one, ws.w[0]) == "");
        std::vector<T> want_two = ws.w[0];
        if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
          for (std::size_t i = 0; i < n; ++i)
            want_two[i] = ref_narrow(ref_widen(ws.w[0][i]) + ref_widen(ws.w[1][i]), T{});
        } else {
          bps::reduce::sum_into(want_two.data(), ws.w[1].data(), n, tt);
        }
        CHECK(mismatch(two, want_two) == "");
      });
    }
  }
}

namespace {

// Floating sums whose order shows in the bits: values of very different magnitudes, so that
// (a + b) + c and a + (b + c) round differently on many elements.
template <class T>
std::vector<T> order_sensitive(std::size_t n, rng& r) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<double>(r.between(-(1 << 22), 1 << 22));
    const double value = std::ldexp(k, static_cast<int>(r.between(-30, 30)) - 22);
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
      v[i] = ref_narrow(static_cast<float>(std::ldexp(k, static_cast<int>(r.between(-8, 8)) - 22)),
                        T{});
    } else if constexpr (std::is_floating_point_v<T>) {
      v[i] = static_cast<T>(value);
    } else {
      v[i] = static_cast<T>(r.next());
    }
  }
  return v;
}

// 2 x 256 + 37 elements: whole blocks of the fp16/bf16 loop and a tail.
constexpr std::size_t order_test_count = 549;

}  // namespace

TEST_CASE("sum_of adds 1 to 9 inputs strictly in their order - bit for bit - in place or not",
          "[reduce]") {
  for (const dtype t : bps::all_dtypes) {
    for (std::size_t k = 1; k <= 9; ++k) {
      with_type(t, [k, t]<class T>() {
        INFO("dtype " << bps::dtype_name(t) << ", " << k << " inputs");
        rng r{0x0a0d3e5ull + k * 131 + static_cast<unsigned>(t)};
        std::vector<std::vector<T>> in;
        for (std::size_t i = 0; i < k; ++i)
          in.push_back(order_sensitive<T>(order_test_count, r));
        // The reference: one input at a time, left to right (fp16/bf16 in fp32, one rounding).
        std::vector<T> want(order_test_count);
        for (std::size_t e = 0; e < order_test_count; ++e) {
          if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
            float acc = ref_widen(in[0][e]);
            for (std::size_t i = 1; i < k; ++i) acc += ref_widen(in[i][e]);
            want[e] = ref_narrow(acc, T{});
          } else {
            T acc = in[0][e];
            for (std::size_t i = 1; i < k; ++i)
              acc = bps::reduce::detail::wrapping_add(acc, in[i][e]);
            want[e] = acc;
          }
        }
        std::vector<const std::byte*> ptrs;
        for (auto& v : in) ptrs.push_back(reinterpret_cast<const std::byte*>(v.data()));
        std::vector<T> out(order_test_count);
        bps::reduce::sum_of(out.data(), ptrs, order_test_count, t);
        CHECK(mismatch(out, want) == "");
        std::vector<T> first = in[0];
        ptrs[0] = reinterpret_cast<const std::byte*>(first.data());
        bps::reduce::sum_of(first.data(), ptrs, order_test_count, t);
        CHECK(mismatch(first, want) == "");
      });
    }
  }
}

TEST_CASE("sum_of of 16-bit floats adds left to right - fp16 2048 + 1 + 2^-13 + 2^-13 is 2048, "
          "bf16 256 + 1 + 2^-16 + 2^-16 is 256, where the last two first give 2050 and 258",
          "[reduce]") {
  // Left to right in fp32: x + 1 is the 16-bit type's tie point between x and the next value,
  // and adding the small value there is an fp32 tie that stays put (twice), so the sum rounds
  // down to x (ties to even). The two small values added first, or the inputs from last to
  // first, land above the tie point and round up. Every element alike, so that each lane of a
  // vector loop and the tail hold it.
  auto left_to_right = [](auto x, float small, float want) {
    using T = decltype(x);
    constexpr std::size_t n = order_test_count;
    const std::vector<T> a(n, x), b(n, ref_narrow(1.0f, T{})), c(n, ref_narrow(small, T{}));
    const std::vector<const std::byte*> ptrs{
        reinterpret_cast<const std::byte*>(a.data()), reinterpret_cast<const std::byte*>(b.data()),
        reinterpret_cast<const std::byte*>(c.data()), reinterpret_cast<const std::byte*>(c.data())};
    std::vector<T> out(n);
    bps::reduce::sum_of(out.data(), ptrs, n, std::is_same_v<T, float16> ? dtype::float16
                                                                        : dtype::bfloat16);
    std::size_t wrong = 0;
    for (const auto& h : out)
      if (h.bits != ref_narrow(want, T{}).bits) ++wrong;
    return wrong;
  };
  CHECK(left_to_right(ref_narrow(2048.0f, float16{}), std::ldexp(1.0f, -13), 2048.0f) == 0);
  CHECK(left_to_right(ref_narrow(256.0f, bfloat16{}), std::ldexp(1.0f, -16), 256.0f) == 0);
}
