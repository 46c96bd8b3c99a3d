#include <byteps/core/config.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "config_env.hpp"

// The variables of liveness (heartbeats, the stall warning), of what a stranger may cost a
// listener (hello, pending connections, name length, tensors), the job token and the servers'
// landing buffers; and config_env.hpp's list of every variable against what from_env() reads.

namespace {

using namespace config_test;

// A whole-number variable: its range, its default, and the field it sets. `companion` is set
// beside it so that its bounds pass validate() (a heartbeat timeout must exceed the interval).
struct ranged {
  const char* name;
  long long min, max, fallback;
  long long (*field)(const bps::Config&);
  const char* companion = nullptr;
  const char* companion_value = nullptr;
};

const ranged ranged_variables[] = {
    {"BYTEPS_HEARTBEAT_INTERVAL_MS", 10, 3600000, 1000,
     [](const bps::Config& c) -> long long { return c.heartbeat_interval.count(); },
     "BYTEPS_HEARTBEAT_TIMEOUT_MS", "86400000"},
    {"BYTEPS_HEARTBEAT_TIMEOUT_MS", 20, 86400000, 10000,
     [](const bps::Config& c) -> long long { return c.heartbeat_timeout.count(); },
     "BYTEPS_HEARTBEAT_INTERVAL_MS", "10"},
    {"BYTEPS_STALL_WARNING_MS", 1, 86400000, 60000,
     [](const bps::Config& c) -> long long { return c.stall_warning.count(); }},
    {"BYTEPS_HELLO_TIMEOUT_MS", 1, 3600000, 5000,
     [](const bps::Config& c) -> long long { return c.hello_timeout.count(); }},
    {"BYTEPS_MAX_PENDING_CONNECTIONS", 1, 1048576, 256,
     [](const bps::Config& c) -> long long { return c.max_pending_connections; }},
    {"BYTEPS_MAX_NAME_BYTES", 1, 4096, 4096,
     [](const bps::Config& c) -> long long { return static_cast<long long>(c.max_name_bytes); }},
    {"BYTEPS_MAX_TENSORS", 1, 4294967296, 1048576,
     [](const bps::Config& c) -> long long { return static_cast<long long>(c.max_tensors); }},
    {"BYTEPS_SERVER_LANDING_BYTES", 0, 1125899906842624, 4294967296,
     [](const bps::Config& c) -> long long {
       return static_cast<long long>(c.server_landing_bytes);
     }},
};

std::string range_error(const ranged& v, const std::string& value) {
  return std::string(v.name) + "='" + value + "' is not valid: expected a whole number from " +
         std::to_string(v.min) + " to " + std::to_string(v.max);
}

std::string joined(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
  return s;
}

}  // namespace

TEST_CASE("Config::from_env reads the heartbeat, stall, hello, pending, name, tensor and landing "
          "variables over their whole range",
          "[config][limits]") {
  clean_env guard;
  for (const auto& v : ranged_variables) {
    CAPTURE(v.name);
    clear_env();
    set_required();
    if (v.companion != nullptr) set(v.companion, v.companion_value);
    CHECK(v.field(bps::Config::from_env()) == v.fallback);  // unset
    set(v.name, "");
    CHECK(v.field(bps::Config::from_env()) == v.fallback);  // empty reads as unset
    set(v.name, std::to_string(v.min).c_str());
    CHECK(v.field(bps::Config::from_env()) == v.min);
    set(v.name, std::to_string(v.max).c_str());
    CHECK(v.field(bps::Config::from_env()) == v.max);
    const std::string middle = std::to_string(v.min + 7);
    set(v.name, middle.c_str());
    CHECK(v.field(bps::Config::from_env()) == v.min + 7);
  }
}

TEST_CASE("Config::from_env refuses each of those variables out of range or malformed, naming it, "
          "the value and the range",
          "[config][limits]") {
  clean_env guard;
  for (const auto& v : ranged_variables) {
    clear_env();
    set_required();
    if (v.companion != nullptr) set(v.companion, v.companion_value);
    for (const std::string& bad : {std::to_string(v.min - 1), std::to_string(v.max + 1),
                                   std::string("12x"), std::string("1e3"), std::string("ten"),
                                   std::string("99999999999999999999")}) {
      CAPTURE(v.name, bad);
      set(v.name, bad.c_str());
      CHECK(from_env_error() == range_error(v, bad));
    }
  }
}

TEST_CASE("BYTEPS_HEARTBEAT_TIMEOUT_MS must be more than BYTEPS_HEARTBEAT_INTERVAL_MS",
          "[config][limits]") {
  clean_env guard;
  set_required();
  set("BYTEPS_HEARTBEAT_INTERVAL_MS", "5000");
  set("BYTEPS_HEARTBEAT_TIMEOUT_MS", "5000");
  CHECK(from_env_error() ==
        "Config: heartbeat_timeout (BYTEPS_HEARTBEAT_TIMEOUT_MS) = 5000 is not valid: expected "
        "more than heartbeat_interval (BYTEPS_HEARTBEAT_INTERVAL_MS)");
  set("BYTEPS_HEARTBEAT_TIMEOUT_MS", "5001");
  const auto c = bps::Config::from_env();
  CHECK(c.heartbeat_interval == std::chrono::milliseconds(5000));
  CHECK(c.heartbeat_timeout == std::chrono::milliseconds(5001));
  // The defaults' timeout, 10000, is below an interval of 20000.
  clear_env();
  set_required();
  set("BYTEPS_HEARTBEAT_INTERVAL_MS", "20000");
  CHECK(from_env_error() ==
        "Config: heartbeat_timeout (BYTEPS_HEARTBEAT_TIMEOUT_MS) = 10000 is not valid: expected "
        "more than heartbeat_interval (BYTEPS_HEARTBEAT_INTERVAL_MS)");
}

TEST_CASE("Config::from_env reads BYTEPS_JOB_TOKEN as any text, unset or empty as no token",
          "[config][limits]") {
  clean_env guard;
  set_required();
  CHECK(bps::Config::from_env().job_token.empty());
  set("BYTEPS_JOB_TOKEN", "");
  CHECK(bps::Config::from_env().job_token.empty());
  set("BYTEPS_JOB_TOKEN", "s3cret with spaces='quotes'=\xc3\xa9");  // any bytes but NUL
  CHECK(bps::Config::from_env().job_token == "s3cret with spaces='quotes'=\xc3\xa9");
  set("BYTEPS_JOB_TOKEN", "x");
  CHECK(bps::Config::from_env().job_token == "x");
}

// The list must be whole: clean_env() unsets only what it names, so a variable missing from it
// leaks from one test case into the next. from_env() names each variable it reads as a string
// literal of its own ("BYTEPS_..." or "DMLC_..."), in one file; its messages hold names too, but
// never as a whole literal.
TEST_CASE("config_env.hpp lists exactly the variables Config::from_env reads", "[config][limits]") {
  const auto source = std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "include" /
                      "byteps" / "core" / "impl" / "config_from_env.hpp";
  std::ifstream in(source);
  INFO("reading " << source.string());
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();

  std::set<std::string> read;
  const std::regex literal(R"re("((?:BYTEPS|DMLC)_[A-Z0-9_]+)")re");
  for (auto m = std::sregex_iterator(s.begin(), s.end(), literal); m != std::sregex_iterator();
       ++m)
    read.insert((*m)[1].str());
  REQUIRE(read.count("DMLC_ROLE") == 1);  // the scan sees what it should
  REQUIRE(read.count("BYTEPS_FUSION_BYTES") == 1);  // a name on the line after its call

  const std::set<std::string> listed(std::begin(all_variables), std::end(all_variables));
  CHECK(listed.size() == std::size(all_variables));  // no name twice
  std::set<std::string> unlisted, not_read;
  for (const auto& n : read)
    if (listed.count(n) == 0) unlisted.insert(n);
  for (const auto& n : listed)
    if (read.count(n) == 0) not_read.insert(n);
  CHECK(joined(unlisted) == "");  // read by from_env() but not in all_variables
  CHECK(joined(not_read) == "");  // in all_variables but not read
}
