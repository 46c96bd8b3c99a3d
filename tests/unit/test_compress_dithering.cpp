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

// Dithering and its Elias-delta stream (compress/dithering.hpp, bitstream.hpp) against references,
// and every decoder given random and bit-flipped bytes.

using namespace compress_test;
using bps::dtype;
using bps::usage_error;
using bps_rng = bps_test::rng;

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
