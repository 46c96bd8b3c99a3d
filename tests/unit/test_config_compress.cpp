#include <byteps/core/config.hpp>

#include <catch2/catch.hpp>

#include <string>

#include "config_env.hpp"
#include "wire_helpers.hpp"

// Config's compression variables: BYTEPS_COMPRESSOR's text form and BYTEPS_MIN_COMPRESS_BYTES.

namespace {

using bps_test::contains;
using namespace config_test;

}  // namespace

TEST_CASE("Config::from_env reads the compression variables, with BytePS's threshold",
          "[config][compress]") {
  clean_env guard;
  set_required();
  auto c = bps::Config::from_env();
  CHECK(c.compressor.empty());
  CHECK(c.min_compress_bytes == 65536);

  set("BYTEPS_COMPRESSOR", "nesterov_ef_randomk:k=0.01,mu=0.9,seed=7");
  set("BYTEPS_MIN_COMPRESS_BYTES", "0");
  c = bps::Config::from_env();
  CHECK(c.compressor == "nesterov_ef_randomk:k=0.01,mu=0.9,seed=7");
  CHECK(c.min_compress_bytes == 0);
  set("BYTEPS_COMPRESSOR", "fp16");
  CHECK(bps::Config::from_env().compressor == "fp16");
}

TEST_CASE("Config::from_env refuses a malformed BYTEPS_COMPRESSOR, naming it and quoting the value",
          "[config][compress]") {
  clean_env guard;
  set_required();
  for (const char* bad : {"topk:", "topk:k", "topk:k=", "topk:k=1,k=2", "top k", "topk:k=1,,",
                          ":k=1", "topk:k=a=b", "ef-topk"}) {
    CAPTURE(bad);
    set("BYTEPS_COMPRESSOR", bad);
    const auto e = from_env_error();
    CHECK(contains(e, "BYTEPS_COMPRESSOR"));
    CHECK(contains(e, std::string("'") + bad + "'"));
    CHECK(contains(e, "name[:key=value"));
  }
  set("BYTEPS_COMPRESSOR", "fp16");
  set("BYTEPS_MIN_COMPRESS_BYTES", "-1");
  CHECK(contains(from_env_error(), "BYTEPS_MIN_COMPRESS_BYTES"));
}

TEST_CASE("Config::validate refuses a compressor with failover, and a malformed one",
          "[config][compress]") {
  bps::Config c;
  c.compressor = "ef_onebit:scaling=1";
  CHECK_NOTHROW(c.validate());
  c.compressor = "onebit:scaling";
  CHECK(contains(validate_error(c), "BYTEPS_COMPRESSOR"));
  c.compressor = "fp16";
  c.failover_timeout = std::chrono::seconds(1);
  const auto e = validate_error(c);
  CHECK(contains(e, "BYTEPS_COMPRESSOR"));
  CHECK(contains(e, "BYTEPS_FAILOVER_TIMEOUT_MS"));
  c.compressor = "none";
  CHECK_NOTHROW(c.validate());
}
