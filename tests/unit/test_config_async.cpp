#include <byteps/core/config.hpp>

#include <catch2/catch.hpp>

#include <string>

#include "config_env.hpp"
#include "wire_helpers.hpp"

// Asynchronous training's two variables: BYTEPS_ENABLE_ASYNC and BYTEPS_ASYNC_STALENESS.

namespace {
using bps_test::contains;
using namespace config_test;
}  // namespace

TEST_CASE("Config::from_env reads the async variables and their defaults", "[config][async]") {
  clean_env guard;
  set_required();
  const auto off = bps::Config::from_env();
  CHECK_FALSE(off.enable_async);
  CHECK(off.async_staleness == -1);  // unbounded, as BytePS

  set("BYTEPS_ENABLE_ASYNC", "1");
  const auto unbounded = bps::Config::from_env();
  CHECK(unbounded.enable_async);
  CHECK(unbounded.async_staleness == -1);

  set("BYTEPS_ASYNC_STALENESS", "0");
  CHECK(bps::Config::from_env().async_staleness == 0);
  set("BYTEPS_ASYNC_STALENESS", "3");
  CHECK(bps::Config::from_env().async_staleness == 3);

  set("BYTEPS_ENABLE_ASYNC", "0");
  set("BYTEPS_ASYNC_STALENESS", "");  // empty reads as unset
  CHECK_FALSE(bps::Config::from_env().enable_async);
}

TEST_CASE("Config::from_env refuses bad async values, naming the variable and quoting the value",
          "[config][async]") {
  clean_env guard;
  set_required();
  set("BYTEPS_ENABLE_ASYNC", "2");
  CHECK(from_env_error() ==
        "BYTEPS_ENABLE_ASYNC='2' is not valid: expected a whole number from 0 to 1");
  set("BYTEPS_ENABLE_ASYNC", "yes");
  CHECK(from_env_error() ==
        "BYTEPS_ENABLE_ASYNC='yes' is not valid: expected a whole number from 0 to 1");
  set("BYTEPS_ENABLE_ASYNC", "1");
  for (const char* bad : {"-1", "1.5", "two", "1099511627777"}) {
    set("BYTEPS_ASYNC_STALENESS", bad);
    CHECK(from_env_error() == std::string("BYTEPS_ASYNC_STALENESS='") + bad +
                                  "' is not valid: expected a whole number from 0 to "
                                  "1099511627776");
  }
}

TEST_CASE("a staleness bound without async mode is refused", "[config][async]") {
  clean_env guard;
  set_required();
  set("BYTEPS_ASYNC_STALENESS", "2");
  const auto msg = from_env_error();
  CAPTURE(msg);
  CHECK(contains(msg, "async_staleness (BYTEPS_ASYNC_STALENESS) = 2"));
  CHECK(contains(msg, "BYTEPS_ENABLE_ASYNC=1"));
}

TEST_CASE("Config::validate names the async fields it refuses", "[config][async]") {
  bps::Config c;
  c.enable_async = true;
  REQUIRE_NOTHROW(c.validate());
  c.async_staleness = 0;
  REQUIRE_NOTHROW(c.validate());
  c.async_staleness = -2;
  CHECK(validate_error(c) ==
        "Config: async_staleness (BYTEPS_ASYNC_STALENESS) = -2 is not valid: expected -1 "
        "(unbounded) or >= 0");
  c.async_staleness = -1;
  c.local_size = 2;
  c.worker_id = 0;
  const auto msg = validate_error(c);
  CHECK(contains(msg, "local_size (BYTEPS_LOCAL_SIZE) = 2"));
  CHECK(contains(msg, "BYTEPS_ENABLE_ASYNC=1"));
}
