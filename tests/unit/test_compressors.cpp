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

// The built-in compressors (compress/*.hpp), each against a small reference computed here from
// the format its header documents; malformed streams refused; the registry.

using namespace compress_test;
using bps::dtype;
using bps::usage_error;
using bps_rng = bps_test::rng;

namespace {

const std::vector<float> sample = {0.5f, -1.25f, 3.0f, -0.0f, 0.0f, 1e-8f, -7.5f, 2.0f, -0.75f};

// The reference top-k: stable sort by |x| descending keeps lower indices first among ties.
std::vector<pair> reference_topk(const std::vector<float>& x, std::size_t k) {
  std::vector<std::uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return std::fabs(x[a]) > std::fabs(x[b]);
  });
  order.resize(std::min(k, x.size()));
  std::sort(order.begin(), order.end());
  std::vector<pair> p;
  for (auto i : order) p.push_back({i, x[i]});
  return p;
}

// The reference random-k indices: Floyd's sampling over xorshift128+ draws, from their
// definitions.
std::vector<std::uint32_t> reference_randomk(xorshift_ref& g, std::size_t n, std::size_t k) {
  std::set<std::uint32_t> s;
  for (std::size_t j = n - k; j < n; ++j) {
    const auto t = static_cast<std::uint32_t>(g.next() % (j + 1));
    s.insert(s.count(t) ? static_cast<std::uint32_t>(j) : t);
  }
  return {s.begin(), s.end()};
}

// The reference dithering: the decoded values the header's definition gives, drawing from `g`
// as the compressor draws from its generator.
std::vector<float> reference_dithering(const std::vector<float>& x, unsigned s, bool natural,
                                       bool l2, xorshift_ref& g) {
  double norm = 0;
  for (float v : x) norm = l2 ? norm + double{v} * v : std::max(norm, double{std::fabs(v)});
  const float norm32 = static_cast<float>(l2 ? std::sqrt(norm) : norm);
  const double S = natural ? std::ldexp(1.0, static_cast<int>(s) - 1) : s;
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = static_cast<double>(g.next() >> 11) / 9007199254740992.0;
    if (norm32 == 0) continue;
    const double r = std::min(std::fabs(double{x[i]}) / norm32 * S, S);
    double lo = std::floor(r), hi = lo + 1;
    if (natural) {
      lo = r < 1 ? 0 : std::exp2(std::floor(std::log2(r)));
      hi = lo == 0 ? 1 : 2 * lo;
    }
    const double level = u < (r - lo) / (hi - lo) ? hi : lo;
    const auto v = static_cast<float>(level * norm32 / S);
    y[i] = x[i] < 0 ? -v : v;
  }
  return y;
}

bytes bits_from(const std::string& text) {
  bytes b((text.size() + 7) / 8);
  for (std::size_t i = 0; i < text.size(); ++i)
    if (text[i] == '1') b[i / 8] |= std::byte{0x80} >> (i % 8);
  return b;
}

}  // namespace

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

TEST_CASE("Elias delta: the known codes, and a round trip from 1 to 2^64 - 1",
          "[compress][dithering][bitstream]") {
  const std::pair<std::uint64_t, std::string> known[] = {
      {1, "1"}, {2, "0100"}, {3, "0101"}, {4, "01100"}, {7, "01111"}, {17, "001010001"}};
  for (const auto& [x, code] : known) {
    CAPTURE(x);
    bytes buf(4);
    bps::compress::bit_writer w(buf);
    bps::compress::put_elias_delta(w, x);
    CHECK(w.bits() == code.size());
    CHECK(bps::compress::elias_delta_bits(x) == code.size());
    buf.resize(w.bytes());
    CHECK(buf == bits_from(code));
  }
  std::vector<std::uint64_t> values;
  for (std::uint64_t x = 1; x <= 5000; ++x) values.push_back(x);
  for (int b = 12; b < 64; ++b) {
    values.push_back((std::uint64_t{1} << b) - 1);
    values.push_back(std::uint64_t{1} << b);
    values.push_back((std::uint64_t{1} << b) + 12345);
  }
  values.push_back(~std::uint64_t{0});
  bytes buf(values.size() * 16);
  bps::compress::bit_writer w(buf);
  for (auto x : values) bps::compress::put_elias_delta(w, x);
  bps::compress::bit_reader r("test", buf, w.bits());
  for (auto x : values) REQUIRE(bps::compress::get_elias_delta(r) == x);
  CHECK(r.done());
  // Seven leading zeros: longer than any 64-bit value; a code cut short.
  auto zeros = bits_from("00000001000000000");
  bps::compress::bit_reader z("test", zeros, 17);
  CHECK_THROWS_AS(bps::compress::get_elias_delta(z), usage_error);
  auto cut = bits_from("0010100");
  bps::compress::bit_reader c("test", cut, 7);
  CHECK_THROWS_AS(bps::compress::get_elias_delta(c), usage_error);
}

TEST_CASE("dithering: the documented stream, bit for bit", "[compress][dithering]") {
  // Max norm 1, s = 2 linear: r = 0, 1, 0, 2 exactly, so no draw changes a level.
  const std::vector<float> x = {0.0f, 0.5f, 0.0f, -1.0f};
  bps::compress::dithering c(2);
  const auto enc = encode(c, bytes_of(x));
  // i = 1: gap 2 "0100", sign "0", level 1 "1"; i = 3: gap 2 "0100", sign "1", level 2 "0100".
  const std::string stream =
      "0100"
      "0"
      "1"
      "0100"
      "1"
      "0100";
  REQUIRE(enc.size() == 8 + 2);
  CHECK(lef32(enc, 0) == 1.0f);
  CHECK(le32(enc, 4) == stream.size());
  CHECK(bytes(enc.begin() + 8, enc.end()) == bits_from(stream));
  CHECK(values_of<float>(decode(c, enc, 16)) == x);
  // All zeros: norm 0, no bits.
  const auto zero = encode(c, bytes_of(std::vector<float>(5, 0.0f)));
  CHECK(zero.size() == 8);
  CHECK(values_of<float>(decode(c, zero, 20)) == std::vector<float>(5, 0.0f));
}

TEST_CASE("dithering: decodes to the reference's quantised values, linear and natural, max and l2",
          "[compress][dithering]") {
  bps_rng r{11};
  for (std::size_t n : {1u, 10u, 1000u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(r.between(-100000, 100000)) * 1e-3f;
    for (bool natural : {false, true}) {
      for (bool l2 : {false, true}) {
        for (unsigned s : {1u, 3u, 8u}) {
          CAPTURE(n, natural, l2, s);
          using D = bps::compress::dithering;
          D c(s, natural ? D::partition::natural : D::partition::linear,
              l2 ? D::normalize::l2 : D::normalize::max, 77);
          xorshift_ref g(77);
          for (int round = 0; round < 3; ++round) {
            const auto expected = reference_dithering(x, s, natural, l2, g);
            const auto enc = encode(c, bytes_of(x));
            CHECK(values_of<float>(decode(c, enc, n * 4)) == expected);
          }
        }
      }
    }
  }
}

TEST_CASE("dithering: bad parameters, non-finite input and malformed streams are refused",
          "[compress][dithering]") {
  using D = bps::compress::dithering;
  CHECK_THROWS_AS(D(0), usage_error);
  auto text = message_of<usage_error>([] { D(32, D::partition::natural); });
  CHECK(text.find("natural") != std::string::npos);
  CHECK_THROWS_AS(D(3, D::partition::linear, D::normalize::max, 0), usage_error);
  D c(2);
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    const std::vector<float> x = {1.0f, bad};
    bytes out(c.max_encoded_bytes(8, dtype::float32));
    CHECK_THROWS_AS(c.encode(bytes_of(x), dtype::float32, out), usage_error);
  }
  const auto stream = [](const std::string& bits) {
    bytes b;
    putf32(b, 1.0f);
    put32(b, static_cast<std::uint32_t>(bits.size()));
    auto body = bits_from(bits);
    b.insert(b.end(), body.begin(), body.end());
    return b;
  };
  bytes out(16);  // 4 elements, top level 2
  CHECK_NOTHROW(c.decode(stream("0100"
                                "0"
                                "1"),
                         dtype::float32, out));
  CHECK(values_of<float>(out) == std::vector<float>{0, 0.5f, 0, 0});
  const std::string bad[] = {
      "01101"
      "0"
      "1",  // gap 5: past 4 elements
      "1"
      "0"
      "0101",  // level 3 above 2
      "1"
      "0",  // ends inside an entry
      "1"
      "0"
      "1"
      "1"
      "0"
      "1"
      "1"
      "0"
      "1"
      "1"
      "0"
      "1"
      "1"
      "0"
      "1",  // a fifth element
  };
  for (const auto& b : bad) {
    CAPTURE(b);
    auto msg = message_of<usage_error>([&] { c.decode(stream(b), dtype::float32, out); });
    INFO(msg);
    CHECK(msg.find("malformed") != std::string::npos);
  }
  auto padded = stream(
      "1"
      "0"
      "1");
  padded.back() |= std::byte{0x01};
  CHECK_THROWS_AS(c.decode(padded, dtype::float32, out), usage_error);
  auto longer = stream(
      "1"
      "0"
      "1");
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(c.decode(longer, dtype::float32, out), usage_error);
  auto lying = stream(
      "1"
      "0"
      "1");
  lying[4] = std::byte{200};  // claims 200 bits
  CHECK_THROWS_AS(c.decode(lying, dtype::float32, out), usage_error);
  CHECK_THROWS_AS(c.decode(bytes(5), dtype::float32, out), usage_error);
}

TEST_CASE("dithering: max_encoded_bytes bounds the worst streams", "[compress][dithering]") {
  using D = bps::compress::dithering;
  for (auto p : {D::partition::linear, D::partition::natural}) {
    for (unsigned s : {1u, 2u, 7u, 20u}) {
      CAPTURE(s);
      D c(s, p);
      // Every element at the top level; one element far from the start; alternating signs.
      std::vector<std::vector<float>> worst = {std::vector<float>(257, 1.0f),
                                               std::vector<float>(300, 0.0f)};
      worst[1].back() = -1.0f;
      std::vector<float> alt(64);
      for (std::size_t i = 0; i < alt.size(); ++i) alt[i] = i % 2 ? -1.0f : 1.0f;
      worst.push_back(alt);
      for (const auto& x : worst) {
        const auto enc = encode(c, bytes_of(x));  // checks the bound
        CHECK(values_of<float>(decode(c, enc, x.size() * 4)) == x);
      }
    }
  }
}

TEST_CASE("error feedback: what was sent plus the kept error equals the input, exactly for topk",
          "[compress][error_feedback]") {
  bps::compress::error_feedback<bps::compress::topk> ef(bps::compress::topk(2));
  CHECK(ef.name() == "ef(topk(k=2))");
  const std::vector<float> x1 = {0.1f, -3.0f, 0.7f, 2.5f, -0.2f};
  auto enc = encode(ef, bytes_of(x1));
  CHECK(pairs_of(enc) == std::vector<pair>{{1, -3.0f}, {3, 2.5f}});
  auto sent = values_of<float>(decode(ef, enc, 20));
  REQUIRE(ef.error().size() == 5);
  for (std::size_t i = 0; i < 5; ++i) CHECK(sent[i] + ef.error()[i] == x1[i]);
  // Round 2 sends the largest of x2 + kept error: 0.7 + 0.7 at index 2 beats 1.0.
  const std::vector<float> x2 = {0.1f, 1.0f, 0.7f, 0.0f, -0.2f};
  std::vector<float> c(5);
  for (std::size_t i = 0; i < 5; ++i) c[i] = x2[i] + ef.error()[i];
  enc = encode(ef, bytes_of(x2));
  CHECK(pairs_of(enc) == std::vector<pair>{{1, 1.0f}, {2, c[2]}});
  sent = values_of<float>(decode(ef, enc, 20));
  for (std::size_t i = 0; i < 5; ++i) CHECK(sent[i] + ef.error()[i] == c[i]);
  // One partition per object.
  auto text = message_of<usage_error>([&] { encode(ef, bytes_of(std::vector<float>(6))); });
  CHECK(text.find("one partition") != std::string::npos);
}

TEST_CASE("error feedback: onebit's error is the input less what was sent, rounded once",
          "[compress][error_feedback]") {
  bps::compress::error_feedback<bps::compress::onebit> ef(bps::compress::onebit(true));
  bps_rng r{3};
  std::vector<float> e(100, 0.0f);
  for (int round = 0; round < 4; ++round) {
    std::vector<float> x(100), c(100);
    for (auto& v : x) v = static_cast<float>(r.between(-5000, 5000)) * 1e-3f;
    for (std::size_t i = 0; i < x.size(); ++i) c[i] = x[i] + e[i];
    const auto sent = values_of<float>(decode(ef, encode(ef, bytes_of(x)), 400));
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(ef.error()[i] == c[i] - sent[i]);
      const double gap = double{sent[i]} + double{ef.error()[i]} - double{c[i]};
      CHECK(std::fabs(gap) <= 0x1p-24 * (std::fabs(double{c[i]}) + std::fabs(double{sent[i]})));
    }
    e.assign(ef.error().begin(), ef.error().end());
  }
}

TEST_CASE("error feedback: the kept error is scaled by previous over current learning rate",
          "[compress][error_feedback]") {
  bps::compress::error_feedback<bps::compress::topk> ef(bps::compress::topk(1));
  const std::vector<float> x = {4.0f, 1.0f, 0.5f};
  ef.set_learning_rate(0.1);
  encode(ef, bytes_of(x));  // sends 4, keeps {0, 1, 0.5}
  ef.set_learning_rate(0.1);
  encode(ef, bytes_of(std::vector<float>{0, 0, 0}));  // ratio 1: sends 1, keeps {0, 0, 0.5}
  CHECK(std::vector<float>(ef.error().begin(), ef.error().end()) == std::vector<float>{0, 0, 0.5f});
  ef.set_learning_rate(0.025);  // ratio 4: c = {0, 0, 2}
  const auto enc = encode(ef, bytes_of(std::vector<float>{0, 0.25f, 0}));
  CHECK(pairs_of(enc) == std::vector<pair>{{2, 2.0f}});
  CHECK(std::vector<float>(ef.error().begin(), ef.error().end()) ==
        std::vector<float>{0, 0.25f, 0});
  CHECK_THROWS_AS(ef.set_learning_rate(0), usage_error);
  CHECK_THROWS_AS(ef.set_learning_rate(std::nan("")), usage_error);
}

TEST_CASE("error feedback and nesterov: float64 and float16 tensors go through fp32",
          "[compress][error_feedback][nesterov]") {
  bps::compress::error_feedback<bps::compress::topk> ef(bps::compress::topk(1));
  const std::vector<double> x = {0.5, -2.0, 1.0};
  const auto enc = encode(ef, bytes_of(x), dtype::float64);
  CHECK(pairs_of(enc) == std::vector<pair>{{1, -2.0f}});
  CHECK(values_of<double>(decode(ef, enc, 24, dtype::float64)) == std::vector<double>{0, -2.0, 0});
  bps::compress::nesterov<bps::compress::onebit> m(bps::compress::onebit(), 0.5f);
  const std::vector<bps::float16> h = {bps::to_float16(-1.0f), bps::to_float16(3.0f)};
  const auto e16 = encode(m, bytes_of(h), dtype::float16);
  const auto back = values_of<bps::float16>(decode(m, e16, 4, dtype::float16));
  CHECK(back[0] == bps::to_float16(-1.0f));
  CHECK(back[1] == bps::to_float16(1.0f));
  CHECK_THROWS_AS(ef.max_encoded_bytes(8, dtype::int32), usage_error);
}

TEST_CASE("nesterov: m = mu m + x, sends x + mu m, against a hand-computed sequence",
          "[compress][nesterov]") {
  // Over identity, what is sent is the update itself.
  bps::compress::nesterov<bps::compress::identity> m(bps::compress::identity{}, 0.5f);
  CHECK(m.name() == "nesterov(none,mu=0.5)");
  const std::vector<std::vector<float>> xs = {{1.0f, -2.0f}, {2.0f, 0.0f}, {4.0f, 1.0f}};
  // m: {1, -2} -> {2.5, -1} -> {5.25, 0.5}; p = x + m / 2.
  const std::vector<std::vector<float>> sent = {{1.5f, -3.0f}, {3.25f, -0.5f}, {6.625f, 1.25f}};
  const std::vector<std::vector<float>> mom = {{1.0f, -2.0f}, {2.5f, -1.0f}, {5.25f, 0.5f}};
  for (std::size_t t = 0; t < xs.size(); ++t) {
    CAPTURE(t);
    CHECK(values_of<float>(encode(m, bytes_of(xs[t]))) == sent[t]);
    CHECK(std::vector<float>(m.momentum().begin(), m.momentum().end()) == mom[t]);
  }
  CHECK_THROWS_AS(
      (bps::compress::nesterov<bps::compress::identity>(bps::compress::identity{}, -0.1f)),
      usage_error);
  // The learning rate reaches an error feedback inside.
  bps::compress::nesterov<bps::compress::error_feedback<bps::compress::topk>> both(
      bps::compress::error_feedback<bps::compress::topk>(bps::compress::topk(1)), 0.9f);
  CHECK(both.name() == "nesterov(ef(topk(k=1)),mu=0.9)");
  CHECK_THROWS_AS(both.set_learning_rate(-1), usage_error);
  static_assert(bps::Compressor<decltype(both)>);
  static_assert(bps::compress::takes_learning_rate<decltype(both)>);
  static_assert(!bps::compress::takes_learning_rate<bps::compress::topk>);
}

TEST_CASE("registry: every built-in by name, with its parameters, decorated or not",
          "[compress][registry]") {
  using bps::compress::make;
  CHECK(make("none")->name() == "none");
  CHECK(make("fp16")->name() == "fp16");
  CHECK(make("bf16")->name() == "bf16");
  CHECK(make("onebit")->name() == "onebit(scaling=false)");
  CHECK(make("onebit", {{"scaling", "True"}})->name() == "onebit(scaling=true)");
  CHECK(make("topk", {{"k", "0.01"}})->name() == "topk(k=0.01)");
  CHECK(make("randomk", {{"k", "8"}})->name() == "randomk(k=8,seed=2020)");
  CHECK(make("randomk", {{"k", "8"}, {"seed", "7"}, {"unbiased", "1"}})->name() ==
        "randomk(k=8,seed=7,unbiased=true)");
  CHECK(make("dithering", {{"s", "4"}})->name() ==
        "dithering(s=4,partition=linear,normalize=max,seed=2020)");
  CHECK(make("dithering", {{"s", "3"}, {"partition", "natural"}, {"normalize", "l2"}})->name() ==
        "dithering(s=3,partition=natural,normalize=l2,seed=2020)");
  CHECK(make("ef_onebit", {{"scaling", "1"}})->name() == "ef(onebit(scaling=true))");
  CHECK(make("nesterov_ef_randomk", {{"k", "3"}, {"mu", "0.9"}, {"seed", "7"}})->name() ==
        "nesterov(ef(randomk(k=3,seed=7)),mu=0.9)");
  CHECK(make("nesterov_topk", {{"k", "1"}, {"mu", "0.5"}})->name() == "nesterov(topk(k=1),mu=0.5)");
  // What the registry makes encodes as the class does.
  auto c = make("ef_topk", {{"k", "2"}});
  bps::compress::error_feedback<bps::compress::topk> direct(bps::compress::topk(2));
  const auto in = bytes_of(sample);
  bytes a(c->max_encoded_bytes(in.size(), dtype::float32)), b(a.size());
  REQUIRE(c->encode(in, dtype::float32, a) == direct.encode(in, dtype::float32, b));
  CHECK(a == b);
  // The learning rate reaches error feedback through any; a compressor without it ignores it.
  CHECK_THROWS_AS(c->set_learning_rate(-1), usage_error);
  CHECK_THROWS_AS(make("nesterov_ef_onebit", {{"mu", "0.9"}})->set_learning_rate(0), usage_error);
  CHECK_NOTHROW(make("topk", {{"k", "2"}})->set_learning_rate(-1));
}

TEST_CASE("registry: unknown names and parameters, and bad values, are usage errors naming them",
          "[compress][registry]") {
  using bps::compress::make;
  auto text = message_of<usage_error>([] { make("top_k", {{"k", "1"}}); });
  CHECK(text.find("'top_k'") != std::string::npos);
  CHECK(text.find("topk") != std::string::npos);
  CHECK(text.find("dithering") != std::string::npos);
  CHECK(text.find("nesterov_") != std::string::npos);
  text = message_of<usage_error>([] { make("ef_nesterov_topk", {{"k", "1"}}); });
  CHECK(text.find("'nesterov_topk'") != std::string::npos);
  text = message_of<usage_error>([] { make("topk", {{"kk", "1"}}); });
  CHECK(text.find("'kk'") != std::string::npos);
  CHECK(text.find("takes k") != std::string::npos);
  text = message_of<usage_error>([] { make("fp16", {{"k", "1"}}); });
  CHECK(text.find("takes none") != std::string::npos);
  text = message_of<usage_error>([] { make("topk", {{"mu", "0.9"}}); });  // mu needs nesterov_
  CHECK(text.find("'mu'") != std::string::npos);
  text = message_of<usage_error>([] { make("topk"); });
  CHECK(text.find("'k' is required") != std::string::npos);
  text = message_of<usage_error>([] { make("dithering"); });
  CHECK(text.find("'s' is required") != std::string::npos);
  text = message_of<usage_error>([] { make("nesterov_onebit"); });
  CHECK(text.find("'mu' is required") != std::string::npos);
  text = message_of<usage_error>([] { make("topk", {{"k", "abc"}}); });
  CHECK(text.find("k = 'abc'") != std::string::npos);
  text = message_of<usage_error>([] { make("onebit", {{"scaling", "yes"}}); });
  CHECK(text.find("true or false") != std::string::npos);
  text = message_of<usage_error>([] { make("dithering", {{"s", "2"}, {"partition", "log"}}); });
  CHECK(text.find("linear, natural") != std::string::npos);
  CHECK_THROWS_AS(make("dithering", {{"s", "-2"}}), usage_error);
  CHECK_THROWS_AS(make("dithering", {{"s", "99999999999"}}), usage_error);
  CHECK_THROWS_AS(make("randomk", {{"k", "2"}, {"seed", "0"}}), usage_error);
  CHECK_THROWS_AS(make("topk", {{"k", "inf"}}), usage_error);
}

TEST_CASE("registry: BytePS's declare parameters, and the server's recipe",
          "[compress][registry]") {
  using bps::compress::recipe;
  CHECK(bps::compress::from_byteps({{"byteps_compressor_type", "topk"},
                                    {"byteps_compressor_k", "3"},
                                    {"byteps_error_feedback_type", "vanilla"}}) ==
        recipe{"ef_topk", {{"k", "3"}}});
  CHECK(bps::compress::from_byteps({{"compressor_type", "dithering"},
                                    {"compressor_k", "4"},
                                    {"dithering_partition", "1"},
                                    {"dithering_normalize", "1"},
                                    {"seed", "9"}}) ==
        recipe{"dithering",
               {{"s", "4"}, {"partition", "natural"}, {"normalize", "l2"}, {"seed", "9"}}});
  const auto r = bps::compress::from_byteps({{"byteps_compressor_type", "onebit"},
                                             {"byteps_compressor_onebit_scaling", "true"},
                                             {"byteps_ef_type", "vanilla"},
                                             {"byteps_momentum_type", "nesterov"},
                                             {"byteps_momentum_mu", "0.9"}});
  CHECK(r == recipe{"nesterov_ef_onebit", {{"scaling", "true"}, {"mu", "0.9"}}});
  CHECK(bps::compress::make(r)->name() == "nesterov(ef(onebit(scaling=true)),mu=0.9)");
  auto text = message_of<usage_error>([] {
    bps::compress::from_byteps({{"compressor_type", "topk"}, {"compressor_kk", "3"}});
  });
  CHECK(text.find("'compressor_kk'") != std::string::npos);
  CHECK(text.find("compressor_k,") != std::string::npos);
  text = message_of<usage_error>([] {
    bps::compress::from_byteps({{"compressor_type", "topk"}, {"ef_type", "corrected"}});
  });
  CHECK(text.find("'corrected'") != std::string::npos);
  CHECK_THROWS_AS(bps::compress::from_byteps({{"compressor_k", "3"}}), usage_error);
  // Servers: no momentum, no unbiased scaling.
  CHECK(
      bps::compress::for_server(recipe{
          "nesterov_ef_randomk", {{"k", "3"}, {"mu", "0.9"}, {"seed", "5"}, {"unbiased", "1"}}}) ==
      recipe{"ef_randomk", {{"k", "3"}, {"seed", "5"}}});
  CHECK(bps::compress::for_server(recipe{"topk", {{"k", "3"}}}) == recipe{"topk", {{"k", "3"}}});
}

TEST_CASE("registry: a recipe's bytes, exactly, a round trip, and malformed bytes refused",
          "[compress][registry]") {
  using bps::compress::recipe;
  const recipe small{"topk", {{"k", "3"}}};
  bytes expected = {std::byte{1}};
  const auto str = [&](std::string_view t) {
    put32(expected, static_cast<std::uint32_t>(t.size()));
    for (char ch : t) expected.push_back(static_cast<std::byte>(ch));
  };
  str("topk");
  put32(expected, 1);
  str("k");
  str("3");
  CHECK(bps::compress::serialise(small) == expected);
  for (const recipe& r :
       {small, recipe{"none", {}},
        recipe{"nesterov_ef_dithering", {{"s", "3"}, {"mu", "0.9"}, {"normalize", "l2"}}}}) {
    CHECK(bps::compress::deserialise(bps::compress::serialise(r)) == r);
  }
  const auto whole = bps::compress::serialise(small);
  for (std::size_t n = 0; n < whole.size(); ++n) {
    CAPTURE(n);
    auto text =
        message_of<usage_error>([&] { bps::compress::deserialise(std::span(whole).first(n)); });
    CHECK(text.find("malformed") != std::string::npos);
  }
  auto longer = whole;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(bps::compress::deserialise(longer), usage_error);
  auto version = whole;
  version[0] = std::byte{2};
  CHECK_THROWS_AS(bps::compress::deserialise(version), usage_error);
  // Keys out of order: "s" then "k".
  bytes unsorted = {std::byte{1}};
  std::swap(expected, unsorted);
  str("topk");
  put32(expected, 2);
  str("s");
  str("1");
  str("k");
  str("1");
  CHECK_THROWS_AS(bps::compress::deserialise(expected), usage_error);
}

namespace {
struct halve {
  explicit halve(float f) : factor(f) {}
  float factor;
  std::string name() const { return "halve"; }
  std::size_t max_encoded_bytes(std::size_t bytes, dtype) const { return bytes; }
  std::size_t encode(std::span<const std::byte> in, dtype, std::span<std::byte> out) {
    std::vector<float> v(in.size() / 4);
    std::memcpy(v.data(), in.data(), in.size());
    for (auto& x : v) x *= factor;
    std::memcpy(out.data(), v.data(), in.size());
    return in.size();
  }
  void decode(std::span<const std::byte> in, dtype, std::span<std::byte> out) {
    std::memcpy(out.data(), in.data(), in.size());
  }
};
}  // namespace

TEST_CASE("registry: a prototype's own algorithm, with the prefixes, and by_name's spec",
          "[compress][registry]") {
  bps::compress::registry reg;
  reg.add("halve", {"factor"}, [](const bps::compress::param_reader& p) {
    return std::unique_ptr<bps::compress::any>(std::make_unique<bps::compress::holder<halve>>(
        halve(static_cast<float>(p.number("factor", 0.5)))));
  });
  CHECK_THROWS_AS(reg.add("halve", {}, nullptr), usage_error);
  CHECK_THROWS_AS(reg.add("ef_mine", {}, nullptr), usage_error);
  auto c = reg.make({"ef_halve", {}});
  CHECK(c->name() == "ef(halve)");
  const std::vector<float> x = {2.0f, -4.0f};
  bytes out(8);
  c->encode(bytes_of(x), dtype::float32, out);
  CHECK(values_of<float>(out) == std::vector<float>{1.0f, -2.0f});
  CHECK_THROWS_AS(bps::compress::make("halve"), usage_error);  // the built-ins only

  auto spec = bps::compress::by_name("ef_topk", {{"k", "0.5"}});
  CHECK(spec->name() == "ef(topk(k=0.5))");
  CHECK(spec->make()->name() == spec->name());
  CHECK(bps::compress::by_name(bps::compress::recipe{"ef_halve", {}}, reg)->name() == "ef(halve)");
  CHECK_THROWS_AS(bps::compress::by_name("topk"), usage_error);  // k missing: refused at once
}

TEST_CASE("every decoder survives random and bit-flipped bytes: decoded or refused, in bounds",
          "[compress][malformed]") {
  bps_rng r{2024};
  const std::vector<bps::compress::recipe> all = {
      {"fp16", {}},
      {"bf16", {}},
      {"onebit", {}},
      {"topk", {{"k", "5"}}},
      {"randomk", {{"k", "0.2"}}},
      {"dithering", {{"s", "3"}}},
      {"dithering", {{"s", "5"}, {"partition", "natural"}, {"normalize", "l2"}}},
      {"ef_topk", {{"k", "3"}}}};
  std::vector<float> x(37);
  for (auto& v : x) v = static_cast<float>(r.between(-100, 100)) / 8.0f;
  for (const auto& recipe : all) {
    CAPTURE(bps::compress::to_string(recipe));
    auto c = bps::compress::make(recipe);
    const auto in = bytes_of(x);
    bytes good(c->max_encoded_bytes(in.size(), dtype::float32));
    good.resize(c->encode(in, dtype::float32, good));
    bytes out(in.size());
    int refused = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      bytes b = good;
      if (trial % 2 == 0) {
        b.resize(
            static_cast<std::size_t>(r.between(0, static_cast<std::int64_t>(good.size()) + 8)));
        for (auto& byte : b) byte = static_cast<std::byte>(r.between(0, 255));
      } else {
        const auto flips = r.between(1, 3);
        for (int f = 0; f < flips; ++f) {
          const auto bit =
              static_cast<std::size_t>(r.between(0, static_cast<std::int64_t>(b.size()) * 8 - 1));
          b[bit / 8] ^= std::byte{1} << (bit % 8);
        }
      }
      try {
        c->decode(b, dtype::float32, out);
      } catch (const usage_error&) {
        ++refused;
      }
    }
    CHECK(refused > 0);
  }
}
