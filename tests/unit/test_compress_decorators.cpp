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

// The decorators error_feedback<C> and nesterov<C> (compress/error_feedback.hpp, nesterov.hpp).

using namespace compress_test;
using bps::dtype;
using bps::usage_error;
using bps_rng = bps_test::rng;

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
