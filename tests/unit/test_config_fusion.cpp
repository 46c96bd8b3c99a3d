#include <byteps/core/config.hpp>
#include <catch2/catch.hpp>
#include <string>

#include "config_env.hpp"
#include "wire_helpers.hpp"

// Config's tensor fusion variable, BYTEPS_FUSION_BYTES (wire/batch.hpp).

namespace {

using bps_test::contains;
using namespace config_test;

}  // namespace

TEST_CASE("Config::from_env reads BYTEPS_FUSION_BYTES: 65536 by default, 0 turns fusion off",
          "[config][fusion]") {
  clean_env guard;
  set_required();
  CHECK(bps::Config::from_env().fusion_bytes == 65536);
  set("BYTEPS_FUSION_BYTES", "0");
  CHECK(bps::Config::from_env().fusion_bytes == 0);
  set("BYTEPS_FUSION_BYTES", "262144");  // the largest
  CHECK(bps::Config::from_env().fusion_bytes == 262144);
  set("BYTEPS_FUSION_BYTES", "1");
  CHECK(bps::Config::from_env().fusion_bytes == 1);
}

TEST_CASE("Config::from_env refuses a bad BYTEPS_FUSION_BYTES, naming it and its range",
          "[config][fusion]") {
  clean_env guard;
  set_required();
  for (const char* bad : {"262145", "-1", "64KiB", "1e5"}) {
    set("BYTEPS_FUSION_BYTES", bad);
    const auto e = from_env_error();
    CAPTURE(bad, e);
    CHECK(e == std::string("BYTEPS_FUSION_BYTES='") + bad +
                   "' is not valid: expected a whole number from 0 to 262144");
  }
}

TEST_CASE("Config::validate refuses fusion_bytes past 262144, naming the variable",
          "[config][fusion]") {
  bps::Config c;
  c.fusion_bytes = 262145;
  const auto e = validate_error(c);
  CAPTURE(e);
  CHECK(contains(e,
                 "fusion_bytes (BYTEPS_FUSION_BYTES) = 262145 is not valid: expected 0 (off) "
                 ".. 262144"));
}
