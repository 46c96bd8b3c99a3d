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

// Recipes and the registry (compress/recipe.hpp, registry.hpp): names, parameters, BytePS's keys,
// the byte form, a prototype's own algorithm, the text form, and what a spec declares.

using namespace compress_test;
using bps::dtype;
using bps::usage_error;
using bps_rng = bps_test::rng;

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

TEST_CASE("recipes: the text form of BYTEPS_COMPRESSOR and --compressor", "[compress][registry]") {
  using bps::compress::parse;
  using bps::compress::recipe;
  CHECK(parse("fp16") == recipe{"fp16", {}});
  CHECK(parse("topk:k=0.01") == recipe{"topk", {{"k", "0.01"}}});
  CHECK(parse("nesterov_ef_onebit:scaling=1,mu=0.9") ==
        recipe{"nesterov_ef_onebit", {{"mu", "0.9"}, {"scaling", "1"}}});
  const auto text = [](const char* t) {
    try {
      parse(t, "--compressor");
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("(no exception)");
  };
  CHECK(text("topk:k") ==
        "--compressor='topk:k' is not valid: 'k' is not key=value; expected "
        "name[:key=value[,key=value]...], e.g. 'topk:k=0.01' or 'ef_onebit:scaling=1'");
  CHECK(text("topk:k=1,k=2").find("the key 'k' is given twice") != std::string::npos);
  CHECK(text("").find("the name '' is not letters") != std::string::npos);
  // Which names exist is the registry's to say, when it makes one.
  CHECK_THROWS_AS(bps::compress::make(parse("zip:level=9")), usage_error);
}

namespace {
struct summed {  // a compressor whose encoding servers sum as the dtype
  static constexpr bool summable = true;
  std::string name() const { return "summed"; }
  std::size_t max_encoded_bytes(std::size_t bytes, dtype) const { return bytes; }
  std::size_t encode(std::span<const std::byte> in, dtype, std::span<std::byte> out) {
    std::memcpy(out.data(), in.data(), in.size());
    return in.size();
  }
  void decode(std::span<const std::byte> in, dtype, std::span<std::byte> out) {
    std::memcpy(out.data(), in.data(), in.size());
  }
};
}  // namespace

TEST_CASE("specs: what each declares to the servers, and none()", "[compress][registry]") {
  using bps::compress::recipe;
  auto r = bps::compress::by_name("ef_topk", {{"k", "0.5"}});
  CHECK(r->declared() == recipe{"ef_topk", {{"k", "0.5"}}});
  CHECK_FALSE(r->is_none());
  CHECK(bps::compress::use<halve>(0.5f)->declared() == recipe{"halve", {}});  // by its name
  CHECK_FALSE(bps::compress::use<summed>()->declared().has_value());  // servers sum it
  const auto none = bps::compress::none();
  CHECK(none->is_none());
  CHECK(none->name() == "none");
  CHECK_FALSE(none->declared().has_value());
  CHECK(bps::compress::use<bps::compress::identity>() == none);
  CHECK(bps::compress::by_name("none") == none);
}
