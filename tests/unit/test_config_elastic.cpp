#include <byteps/core/config.hpp>

#include <catch2/catch.hpp>

#include <string>

#include "config_env.hpp"
#include "wire_helpers.hpp"

// Elastic training's two variables: BYTEPS_MIN_NUM_WORKER and BYTEPS_MAX_NUM_WORKER, and what
// elastic training refuses until it covers it.

namespace {
using bps_test::contains;
using namespace config_test;
}  // namespace

TEST_CASE("Config::from_env reads BYTEPS_MIN_NUM_WORKER and BYTEPS_MAX_NUM_WORKER, either of which turns "
          "elastic training on",
          "[config][elastic]") {
  clean_env guard;
  set_required();
  set("DMLC_NUM_WORKER", "4");
  const auto off = bps::Config::from_env();
  CHECK_FALSE(off.elastic());
  CHECK(off.min_workers == 0);
  CHECK(off.max_workers == 0);

  set("BYTEPS_MIN_NUM_WORKER", "2");
  const auto at_least = bps::Config::from_env();
  CHECK(at_least.elastic());
  CHECK(at_least.fewest_workers() == 2);
  CHECK(at_least.max_workers == 0);

  set("BYTEPS_MIN_NUM_WORKER", "");
  set("BYTEPS_MAX_NUM_WORKER", "8");
  const auto at_most = bps::Config::from_env();
  CHECK(at_most.elastic());
  CHECK(at_most.fewest_workers() == 1);
  CHECK(at_most.max_workers == 8);
}

TEST_CASE("Config::from_env takes a DMLC_WORKER_ID up to BYTEPS_MAX_NUM_WORKER-1, for a worker "
          "that joins a running job",
          "[config][elastic]") {
  clean_env guard;
  set_required();
  set("DMLC_ROLE", "worker");
  set("DMLC_NUM_WORKER", "3");
  set("DMLC_WORKER_ID", "3");
  CHECK(from_env_error() == "DMLC_WORKER_ID='3' is not valid: expected a whole number from 0 to 2");
  set("BYTEPS_MAX_NUM_WORKER", "4");
  const auto c = bps::Config::from_env();
  CHECK(c.worker_id == 3);
  CHECK(c.worker_slots() == 4);
  CHECK_NOTHROW(c.validate());
  set("DMLC_WORKER_ID", "4");
  CHECK(from_env_error() == "DMLC_WORKER_ID='4' is not valid: expected a whole number from 0 to 3");
}

TEST_CASE("Config::from_env refuses bad elastic bounds, naming the variable and what it expects",
          "[config][elastic]") {
  clean_env guard;
  set_required();
  set("DMLC_NUM_WORKER", "4");
  set("BYTEPS_MIN_NUM_WORKER", "0");
  CHECK(from_env_error() ==
        "BYTEPS_MIN_NUM_WORKER='0' is not valid: expected a whole number from 1 to 1048576");
  set("BYTEPS_MIN_NUM_WORKER", "5");
  auto msg = from_env_error();
  CAPTURE(msg);
  CHECK(contains(msg, "min_workers (BYTEPS_MIN_NUM_WORKER) = 5"));
  CHECK(contains(msg, "num_workers (DMLC_NUM_WORKER) = 4"));
  set("BYTEPS_MIN_NUM_WORKER", "");
  set("BYTEPS_MAX_NUM_WORKER", "3");
  msg = from_env_error();
  CHECK(contains(msg, "max_workers (BYTEPS_MAX_NUM_WORKER) = 3"));
  CHECK(contains(msg, "num_workers (DMLC_NUM_WORKER) = 4 .. 1048576"));
}

TEST_CASE("Config::validate refuses with elastic training what it does not cover yet, naming each",
          "[config][elastic]") {
  bps::Config c;
  c.num_workers = 3;
  c.num_servers = 4;
  c.min_workers = 2;
  REQUIRE_NOTHROW(c.validate());
  auto refused = [&](auto change, const std::string& field) {
    bps::Config bad = c;
    change(bad);
    const auto msg = validate_error(bad);
    CAPTURE(msg);
    CHECK(contains(msg, field));
    CHECK(contains(msg, "elastic training"));
    CHECK(contains(msg, "not supported yet"));
  };
  bps::Config local = c;  // machines of several processes leave whole
  local.local_size = 2;
  local.worker_id = 0;
  CHECK_NOTHROW(local.validate());
  bps::Config async = c;  // asynchronous training is covered
  async.enable_async = true;
  CHECK_NOTHROW(async.validate());
  bps::Config failover = c;  // server failover is covered: offers carry their contributor count
  failover.failover_timeout = std::chrono::milliseconds(100);
  CHECK_NOTHROW(failover.validate());
  refused(
      [](bps::Config& b) {
        b.failover_timeout = std::chrono::milliseconds(100);
        b.enable_async = true;
      },
      "failover_timeout (BYTEPS_FAILOVER_TIMEOUT_MS) = 100");
  bps::Config compressed = c;  // compression is covered: a redo re-sends the encoding
  compressed.compressor = "ef_onebit:scaling=1";
  CHECK_NOTHROW(compressed.validate());
  refused([](bps::Config& b) { b.mixed_mode = true; }, "mixed_mode (BYTEPS_ENABLE_MIXED_MODE)");
  // Without elastic training each of them is fine.
  bps::Config plain = c;
  plain.min_workers = 0;
  plain.failover_timeout = std::chrono::milliseconds(100);
  CHECK_NOTHROW(plain.validate());
}
