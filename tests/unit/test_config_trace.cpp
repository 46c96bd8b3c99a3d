#include <byteps/core/config.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "config_env.hpp"
#include "wire_helpers.hpp"

// Config's timeline variables and the server's log interval.

namespace {

using bps_test::contains;
using namespace config_test;

}  // namespace

TEST_CASE("Config::from_env reads the timeline variables, with BytePS's defaults", "[config][trace]") {
  clean_env guard;
  set_required();
  auto c = bps::Config::from_env();
  CHECK_FALSE(c.trace_on);
  CHECK(c.trace_start_step == 10);
  CHECK(c.trace_end_step == 20);
  CHECK(c.trace_dir == "./trace");

  set("BYTEPS_TRACE_ON", "1");
  set("BYTEPS_TRACE_START_STEP", "3");
  set("BYTEPS_TRACE_END_STEP", "3");  // an empty window is allowed: nothing is recorded
  set("BYTEPS_TRACE_DIR", "/tmp/job-7/trace");
  c = bps::Config::from_env();
  CHECK(c.trace_on);
  CHECK(c.trace_start_step == 3);
  CHECK(c.trace_end_step == 3);
  CHECK(c.trace_dir == "/tmp/job-7/trace");
}

TEST_CASE("Config::from_env refuses bad timeline variables, naming each", "[config][trace]") {
  clean_env guard;
  set_required();
  set("BYTEPS_TRACE_ON", "yes");
  CHECK(from_env_error() ==
        "BYTEPS_TRACE_ON='yes' is not valid: expected a whole number from 0 to 1");
  set("BYTEPS_TRACE_ON", "1");
  set("BYTEPS_TRACE_START_STEP", "-1");
  CHECK(contains(from_env_error(), "BYTEPS_TRACE_START_STEP='-1' is not valid"));
  set("BYTEPS_TRACE_START_STEP", "12");
  set("BYTEPS_TRACE_END_STEP", "x");
  CHECK(contains(from_env_error(), "BYTEPS_TRACE_END_STEP='x' is not valid"));
  set("BYTEPS_TRACE_END_STEP", "11");
  CHECK(from_env_error() ==
        "BYTEPS_TRACE_END_STEP=11 is not valid: expected at least BYTEPS_TRACE_START_STEP=12 "
        "(steps START .. END-1 are traced)");
}

TEST_CASE("Config::validate names bad timeline fields", "[config][trace]") {
  bps::Config c;
  c.trace_start_step = -2;
  CHECK(contains(validate_error(c), "trace_start_step (BYTEPS_TRACE_START_STEP) = -2"));
  c.trace_start_step = 5;
  c.trace_end_step = 4;
  CHECK(contains(validate_error(c), "trace_end_step (BYTEPS_TRACE_END_STEP) = 4 is not valid: "
                                    "expected at least trace_start_step"));
  c.trace_end_step = 5;
  c.trace_on = true;
  c.trace_dir.clear();
  CHECK(contains(validate_error(c), "trace_dir (BYTEPS_TRACE_DIR)"));
  c.trace_dir = "t";
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("Config::from_env reads the server's log interval with 0 for off", "[config]") {
  clean_env guard;
  set_required();
  CHECK(bps::Config::from_env().server_log_interval == std::chrono::milliseconds(10000));
  set("BYTEPS_SERVER_LOG_INTERVAL_MS", "0");
  CHECK(bps::Config::from_env().server_log_interval.count() == 0);
  set("BYTEPS_SERVER_LOG_INTERVAL_MS", "250");
  CHECK(bps::Config::from_env().server_log_interval == std::chrono::milliseconds(250));
  set("BYTEPS_SERVER_LOG_INTERVAL_MS", "-1");
  CHECK(from_env_error().find("BYTEPS_SERVER_LOG_INTERVAL_MS") != std::string::npos);
  bps::Config c;
  c.server_log_interval = std::chrono::milliseconds(-5);
  CHECK(validate_error(c).find("BYTEPS_SERVER_LOG_INTERVAL_MS") != std::string::npos);
}
