#include <bit>
#include <byteps/compress/cast.hpp>
#include <byteps/compress/onebit.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "compress_helpers.hpp"

// The built-in compressors (compress/*.hpp), each against a small reference computed here from
// the format its header documents; malformed streams refused; the registry.

using namespace compress_test;
using bps::dtype;
using bps::usage_error;

namespace {

const std::vector<float> sample = {0.5f, -1.25f, 3.0f, -0.0f, 0.0f, 1e-8f, -7.5f, 2.0f, -0.75f};

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
