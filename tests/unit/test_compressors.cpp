#include <bit>
#include <byteps/compress/bitstream.hpp>
#include <byteps/compress/cast.hpp>
#include <byteps/compress/dithering.hpp>
#include <byteps/compress/error_feedback.hpp>
#include <byteps/compress/nesterov.hpp>
#include <byteps/compress/onebit.hpp>
#include <byteps/compress/randomk.hpp>
#include <byteps/compress/recipe.hpp>
#include <byteps/compress/registry.hpp>
#include <byteps/compress/topk.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "compress_helpers.hpp"
#include "reference.hpp"
#include "compress_references.hpp"

// The built-in algorithms fp16/bf16, onebit, topk and randomk (compress/*.hpp), each against a
// small reference computed here from the format its header documents; malformed streams refused.

using namespace compress_test;
using bps::dtype;
using bps::usage_error;
using bps_rng = bps_test::rng;

TEST_CASE("fp16 and bf16: each element's 16-bit pattern, little-endian, and back",
          "[compress][cast]") {
  const std::vector<float> x = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 1.0009765625f, 3.14159f};
  bps::compress::fp16 h;
  auto enc = encode(h, bytes_of(x));
  REQUIRE(enc.size() == 2 * x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto bits =
        std::to_integer<unsigned>(enc[2 * i]) | std::to_integer<unsigned>(enc[2 * i + 1]) << 8;
    CHECK(bits == bps::to_float16(x[i]).bits);
  }
  auto back = values_of<float>(decode(h, enc, x.size() * 4));
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(back[i] == bps::to_float(bps::to_float16(x[i])));

  bps::compress::bf16 b;
  enc = encode(b, bytes_of(x));
  REQUIRE(enc.size() == 2 * x.size());
  CHECK(enc[0] == std::byte{0x80});  // 1.0f = 0x3f80
  CHECK(enc[1] == std::byte{0x3f});
  back = values_of<float>(decode(b, enc, x.size() * 4));
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK(back[i] == bps::to_float(bps::to_bfloat16(x[i])));
}

TEST_CASE("fp16 and bf16: other dtypes and wrong stream sizes are usage errors naming them",
          "[compress][cast]") {
  bps::compress::fp16 h;
  const bytes d(16);
  auto text = message_of<usage_error>([&] { h.max_encoded_bytes(16, dtype::float64); });
  CHECK(text.find("'fp16'") != std::string::npos);
  CHECK(text.find("float64") != std::string::npos);
  text = message_of<usage_error>([&] { bps::compress::bf16{}.max_encoded_bytes(8, dtype::int32); });
  CHECK(text.find("'bf16'") != std::string::npos);
  CHECK(text.find("int32") != std::string::npos);
  bytes out(16);
  CHECK_THROWS_AS(h.decode(bytes(6), dtype::float32, out), usage_error);  // 4 elements need 8
  CHECK_THROWS_AS(h.decode(bytes(10), dtype::float32, out), usage_error);
  bytes small(4);
  CHECK_THROWS_AS(h.encode(d, dtype::float32, small), usage_error);  // no room
}

TEST_CASE("onebit: the scale, then sign bits least significant first, exact bits",
          "[compress][onebit]") {
  bps::compress::onebit plain;
  auto enc = encode(plain, bytes_of(sample));
  // 9 elements: 4 + 2 bytes. Negatives at 1, 6, 8 (-0 is not negative): 0b0100'0010, 0b1.
  REQUIRE(enc.size() == 6);
  CHECK(lef32(enc, 0) == 1.0f);
  CHECK(enc[4] == std::byte{0x42});
  CHECK(enc[5] == std::byte{0x01});
  auto back = round_trip(plain, sample);
  for (std::size_t i = 0; i < sample.size(); ++i) CHECK(back[i] == (sample[i] < 0 ? -1.0f : 1.0f));

  bps::compress::onebit scaled(true);
  double sum = 0;
  for (float v : sample) sum += std::fabs(v);
  const float scale = static_cast<float>(sum / sample.size());
  enc = encode(scaled, bytes_of(sample));
  CHECK(lef32(enc, 0) == scale);
  CHECK(enc[4] == std::byte{0x42});
  back = round_trip(scaled, sample);
  for (std::size_t i = 0; i < sample.size(); ++i)
    CHECK(back[i] == (sample[i] < 0 ? -scale : scale));

  // Exactly 8 elements: no padding byte.
  const std::vector<float> eight(8, -1.0f);
  enc = encode(plain, bytes_of(eight));
  REQUIRE(enc.size() == 5);
  CHECK(enc[4] == std::byte{0xff});
}

TEST_CASE("onebit: float64, float16 and bfloat16 tensors go through fp32", "[compress][onebit]") {
  bps::compress::onebit scaled(true);
  const std::vector<double> x = {0.5, -1.5, 2.0};
  auto enc = encode(scaled, bytes_of(x), dtype::float64);
  REQUIRE(enc.size() == 5);
  CHECK(lef32(enc, 0) == static_cast<float>(4.0 / 3.0));
  auto back = values_of<double>(decode(scaled, enc, 24, dtype::float64));
  CHECK(back == std::vector<double>{static_cast<float>(4.0 / 3.0), -static_cast<float>(4.0 / 3.0),
                                    static_cast<float>(4.0 / 3.0)});
  const std::vector<bps::float16> h = {bps::to_float16(-3.0f), bps::to_float16(1.0f)};
  enc = encode(scaled, bytes_of(h), dtype::float16);
  CHECK(lef32(enc, 0) == 2.0f);
  CHECK(enc[4] == std::byte{0x01});
  auto hb = values_of<bps::float16>(decode(scaled, enc, 4, dtype::float16));
  CHECK(hb[0] == bps::to_float16(-2.0f));
  CHECK(hb[1] == bps::to_float16(2.0f));
  CHECK_THROWS_AS(scaled.max_encoded_bytes(8, dtype::int64), usage_error);
}

TEST_CASE("onebit: a stream of another size or with padding bits set is refused",
          "[compress][onebit]") {
  bps::compress::onebit c;
  auto enc = encode(c, bytes_of(sample));
  bytes out(sample.size() * 4);
  auto cut = enc;
  cut.pop_back();
  auto text = message_of<usage_error>([&] { c.decode(cut, dtype::float32, out); });
  CHECK(text.find("malformed") != std::string::npos);
  CHECK(text.find("onebit") != std::string::npos);
  auto longer = enc;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(c.decode(longer, dtype::float32, out), usage_error);
  auto padded = enc;
  padded.back() |= std::byte{0x80};  // element 15 of 9
  CHECK_THROWS_AS(c.decode(padded, dtype::float32, out), usage_error);
  CHECK_THROWS_AS(c.decode({}, dtype::float32, out), usage_error);
}

TEST_CASE(
    "topk: the k largest magnitudes as ascending (index, value) pairs, ties to the lower index",
    "[compress][topk]") {
  const std::vector<float> x = {0.5f, -3.0f, 2.0f, -2.0f, 0.0f, 7.0f, -7.0f, 1.0f};
  bps::compress::topk three(3);
  auto enc = encode(three, bytes_of(x));
  CHECK(pairs_of(enc) == std::vector<pair>{{1, -3.0f}, {5, 7.0f}, {6, -7.0f}});
  CHECK(round_trip(three, x) == std::vector<float>{0, -3.0f, 0, 0, 0, 7.0f, -7.0f, 0});
  // |2| at 2 and 3: the lower index goes.
  bps::compress::topk four(4);
  CHECK(pairs_of(encode(four, bytes_of(x))) ==
        std::vector<pair>{{1, -3.0f}, {2, 2.0f}, {5, 7.0f}, {6, -7.0f}});
  // A fraction: floor(0.25 * 8) = 2; at least 1 (floor(0.01 * 8) = 0); a count above n sends all.
  bps::compress::topk quarter(0.25);
  CHECK(quarter.max_encoded_bytes(32, dtype::float32) == 4 + 2 * 8);
  CHECK(pairs_of(encode(quarter, bytes_of(x))) == std::vector<pair>{{5, 7.0f}, {6, -7.0f}});
  bps::compress::topk tiny(0.01);
  CHECK(pairs_of(encode(tiny, bytes_of(x))) == std::vector<pair>{{5, 7.0f}});
  bps::compress::topk all(100);
  CHECK(pairs_of(encode(all, bytes_of(x))).size() == x.size());
  CHECK(round_trip(all, x) == x);
  // NaN ranks above infinity.
  const std::vector<float> special = {1.0f, std::numeric_limits<float>::infinity(),
                                      std::numeric_limits<float>::quiet_NaN(), -2.0f};
  bps::compress::topk one(1);
  CHECK(pairs_of(encode(one, bytes_of(special)))[0].index == 2);
}

TEST_CASE("topk: many ties and sizes against the reference", "[compress][topk]") {
  bps_rng r{42};
  for (std::size_t n : {1u, 7u, 64u, 1000u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(r.between(-4, 4)) * 0.5f;  // few distinct values
    for (double k : {1.0, 3.0, 0.1, 0.5, 0.999}) {
      CAPTURE(n, k);
      bps::compress::topk c(k);
      const auto expected = reference_topk(x, c.max_encoded_bytes(n * 4, dtype::float32) / 8);
      CHECK(pairs_of(encode(c, bytes_of(x))) == expected);
    }
  }
}

TEST_CASE("topk and randomk: bad k, malformed streams and huge partitions are refused",
          "[compress][topk][randomk]") {
  for (double k : {0.0, -1.0, 1.5, std::nan(""), 1e12}) {
    CAPTURE(k);
    auto text = message_of<usage_error>([&] { bps::compress::topk c(k); });
    CHECK(text.find("'topk'") != std::string::npos);
    CHECK_THROWS_AS(bps::compress::randomk(k), usage_error);
  }
  bps::compress::topk c(2);
  bytes out(4 * 4);  // 4 elements
  CHECK_NOTHROW(c.decode(sparse_stream({{0, 1.0f}, {3, 2.0f}}), dtype::float32, out));
  CHECK(values_of<float>(out) == std::vector<float>{1.0f, 0, 0, 2.0f});
  const std::vector<std::vector<pair>> bad = {
      {{4, 1.0f}},                                               // out of range
      {{2, 1.0f}, {1, 1.0f}},                                    // descending
      {{1, 1.0f}, {1, 2.0f}},                                    // repeated
      {{0, 1.0f}, {1, 1.0f}, {2, 1.0f}, {3, 1.0f}, {3, 1.0f}}};  // more pairs than elements
  for (const auto& p : bad) {
    auto text = message_of<usage_error>([&] { c.decode(sparse_stream(p), dtype::float32, out); });
    CHECK(text.find("malformed") != std::string::npos);
  }
  auto ok = sparse_stream({{0, 1.0f}, {3, 2.0f}});
  auto cut = ok;
  cut.pop_back();
  CHECK_THROWS_AS(c.decode(cut, dtype::float32, out), usage_error);
  auto longer = ok;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(c.decode(longer, dtype::float32, out), usage_error);
  CHECK_THROWS_AS(c.decode(bytes(3), dtype::float32, out), usage_error);
  bps::compress::randomk rk(2);
  CHECK_THROWS_AS(rk.decode(sparse_stream({{9, 1.0f}}), dtype::float32, out), usage_error);
}

TEST_CASE("randomk: xorshift128+ seeded as BytePS seeds it", "[compress][randomk]") {
  bps::compress::xorshift128p g(2020, "test");
  // Computed independently from the published recurrence.
  CHECK(g.next() == 0x3f20200e4ull);
  CHECK(g.next() == 0x3f2020018ull);
  CHECK(g.next() == 0x1f90003f27e4e30ull);
  auto text = message_of<usage_error>([] { bps::compress::randomk c(3, 0); });
  CHECK(text.find("seed") != std::string::npos);
}

TEST_CASE("randomk: k distinct indices from the seeded generator, the same on every node",
          "[compress][randomk]") {
  bps_rng r{7};
  std::vector<float> x(1000);
  for (auto& v : x) v = static_cast<float>(r.between(-1000, 1000)) / 64.0f;
  for (double k : {10.0, 0.05, 1000.0, 5000.0}) {
    CAPTURE(k);
    bps::compress::randomk worker(k, 99), server(k, 99), other(k, 100);
    xorshift_ref g(99);
    const std::size_t count = std::min<std::size_t>(
        k < 1 ? static_cast<std::size_t>(k * 1000) : static_cast<std::size_t>(k), 1000);
    std::vector<std::uint32_t> previous;
    for (int round = 0; round < 3; ++round) {
      const auto idx = reference_randomk(g, x.size(), count);
      std::vector<pair> expected;
      for (auto i : idx) expected.push_back({i, x[i]});
      const auto enc = encode(worker, bytes_of(x));
      CHECK(pairs_of(enc) == expected);
      CHECK(encode(server, bytes_of(x)) == enc);  // same seed, same round: same bytes
      if (count < x.size()) {
        CHECK(encode(other, bytes_of(x)) != enc);
        CHECK(idx != previous);  // each round draws anew
      }
      previous = idx;
      std::vector<float> back(x.size(), 0.0f);
      for (auto [i, v] : expected) back[i] = v;
      CHECK(values_of<float>(decode(worker, enc, x.size() * 4)) == back);
    }
  }
}

TEST_CASE("randomk: unbiased scales the values sent by n / k", "[compress][randomk]") {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};
  bps::compress::randomk c(2, 5, true);
  xorshift_ref g(5);
  const auto idx = reference_randomk(g, x.size(), 2);
  const auto p = pairs_of(encode(c, bytes_of(x)));
  REQUIRE(p.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) CHECK(p[i] == pair{idx[i], x[idx[i]] * 4.0f});
  CHECK(c.name() == "randomk(k=2,seed=5,unbiased=true)");
}
