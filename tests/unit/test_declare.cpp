#include <byteps/wire/declare.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

// The declare payload (wire/declare.hpp): a name and a compressor recipe's bytes, bounds-checked.

using bps::wire::declaration;
using bps::wire::decode_declare;
using bps::wire::decode_error;
using bps::wire::encode_declare;

TEST_CASE("declare: the payload's bytes exactly, and a round trip with and without a recipe",
          "[wire][compress]") {
  const std::vector<std::byte> recipe = {std::byte{1}, std::byte{0}, std::byte{0xff}};
  const auto b = encode_declare(declaration{"w", recipe});
  const std::vector<std::byte> expected = {std::byte{1},                                      // v
                                           std::byte{1}, std::byte{0}, std::byte{0}, std::byte{0},
                                           std::byte{'w'},                                    // name
                                           std::byte{3}, std::byte{0}, std::byte{0}, std::byte{0},
                                           std::byte{1}, std::byte{0}, std::byte{0xff}};      // recipe
  CHECK(b == expected);
  const auto d = decode_declare(b);
  CHECK(d.name == "w");
  CHECK(d.recipe == recipe);
  const auto plain = decode_declare(encode_declare(declaration{std::string(4096, 'n'), {}}));
  CHECK(plain.name == std::string(4096, 'n'));
  CHECK(plain.recipe.empty());
}

TEST_CASE("declare: malformed payloads are decode errors, never reads out of bounds",
          "[wire][compress]") {
  const auto good = encode_declare(declaration{"layer.weight", std::vector<std::byte>(20)});
  for (std::size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS(decode_declare(std::span(good).first(n)), decode_error);
  }
  auto longer = good;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(decode_declare(longer), decode_error);
  auto version = good;
  version[0] = std::byte{2};
  CHECK_THROWS_AS(decode_declare(version), decode_error);
  CHECK_THROWS_AS(decode_declare(encode_declare(declaration{"", {}})), decode_error);
  CHECK_THROWS_AS(decode_declare(encode_declare(declaration{std::string(4097, 'n'), {}})),
                  decode_error);
  CHECK_THROWS_AS(
      decode_declare(encode_declare(declaration{"w", std::vector<std::byte>(16385)})),
      decode_error);
  auto huge = good;  // a name length of 2^32 - 1
  huge[1] = huge[2] = huge[3] = huge[4] = std::byte{0xff};
  CHECK_THROWS_AS(decode_declare(huge), decode_error);
}
