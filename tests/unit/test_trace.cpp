#include <unistd.h>

#include <atomic>
#include <byteps/detail/tracer.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "trace/trace_job.hpp"
#include "wire_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using bps::trace_tool::json;
using bps_test::contains;

// A fresh folder under TMPDIR (the test sandbox under CTest), removed at the end.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() /
           ("bps-trace-unit-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::remove_all(path);
  }
  ~temp_dir() { fs::remove_all(path); }
};

bps::Config trace_config(const fs::path& dir, int start, int end) {
  bps::Config c;
  c.trace_on = true;
  c.trace_start_step = start;
  c.trace_end_step = end;
  c.trace_dir = dir.string();
  return c;
}

std::vector<const json*> events_named(const json& doc, const std::string& ph,
                                      const std::string& name) {
  std::vector<const json*> out;
  for (const auto& e : doc.find("traceEvents")->items)
    if (e.string_or("ph", "") == ph && e.string_or("name", "") == name) out.push_back(&e);
  return out;
}

}  // namespace

TEST_CASE("trace: the step window holds rounds START .. END-1 of the first tensor", "[trace]") {
  temp_dir dir;
  bps::detail::trace_recorder rec(trace_config(dir.path, 2, 4), bps::role::worker);
  const std::uint64_t first = 111, other = 222;
  std::vector<bool> first_in, other_in;
  for (std::uint64_t round = 0; round < 6; ++round) {
    first_in.push_back(rec.in_window(first, round));
    // Another tensor follows the first one's step, whatever its own round is.
    other_in.push_back(rec.in_window(other, round + 100));
  }
  CHECK(first_in == std::vector<bool>{false, false, true, true, false, false});
  CHECK(other_in == std::vector<bool>{false, false, true, true, false, false});
}

TEST_CASE("trace: broadcasts do not set the step, the first push_pulled tensor does", "[trace]") {
  temp_dir dir;
  bps::detail::trace_recorder rec(trace_config(dir.path, 0, 2), bps::role::worker);
  CHECK_FALSE(rec.in_window(9, 0, false));  // a broadcast before any push_pull: no step yet
  CHECK(rec.in_window(5, 0));               // the first push_pulled tensor: step 0
  CHECK(rec.in_window(9, 1, false));        // still step 0
  CHECK(rec.in_window(5, 1));
  CHECK_FALSE(rec.in_window(5, 2));
  CHECK_FALSE(rec.in_window(9, 0, false));  // step 2: outside
}

TEST_CASE("trace: an empty window (START == END) records nothing", "[trace]") {
  temp_dir dir;
  bps::detail::trace_recorder rec(trace_config(dir.path, 3, 3), bps::role::worker);
  for (std::uint64_t round = 0; round < 6; ++round) CHECK_FALSE(rec.in_window(7, round));
}

TEST_CASE("trace: off, the tracer holds nothing and reads no clock", "[trace]") {
  bps::Config c;  // trace_on = false
  c.trace_dir = "/nonexistent/never/made";
  bps::detail::tracer t(c, bps::role::worker);
  CHECK_FALSE(t.on());
  CHECK(t.now() == 0);
  bps::detail::op_state op;
  op.key = 5;
  t.begin(op, "g", 0, 3);
  CHECK(op.trace == nullptr);
  t.dispatched(op, 0, 1);  // no effect, no crash
  CHECK_FALSE(fs::exists("/nonexistent/never/made"));
}

TEST_CASE("trace: a bad BYTEPS_TRACE_DIR fails at start, naming the variable", "[trace]") {
  temp_dir dir;
  fs::create_directories(dir.path);
  { std::ofstream(dir.path / "file") << "x"; }
  try {
    bps::detail::tracer t(trace_config(dir.path / "file", 0, 1), bps::role::server);
    FAIL("no error");
  } catch (const bps::usage_error& e) {
    CHECK(contains(e.what(), "BYTEPS_TRACE_DIR='"));
    CHECK(contains(e.what(), "set it to a writable folder or set BYTEPS_TRACE_ON=0"));
  }
}

TEST_CASE("trace: one worker operation becomes nested spans and flow starts in Chrome JSON",
          "[trace]") {
  temp_dir dir;
  bps::detail::tracer t(trace_config(dir.path, 0, 1), bps::role::worker);
  t.name_node(3, "worker 3", 1);
  std::vector<float> data(10);
  bps::detail::op_state op;
  op.key = 42;
  op.data = std::as_writable_bytes(std::span(data));
  t.begin(op, "w\"eird", 0, 2);  // a name that needs escaping
  REQUIRE(op.trace != nullptr);
  for (std::uint32_t part = 0; part < 2; ++part) {
    t.dispatched(op, part, static_cast<int>(part));
    t.sent(op, part, op.key, part);
    t.answered(op, part, op.key, part);
  }
  op.finish(nullptr);
  t.write({.offset_ns = 1500, .rtt_ns = 300, .samples = 4}, bps::logger(bps::log_level::off, "t"));

  const auto doc = bps::trace_tool::read_json_file((dir.path / "worker-3.json").string());
  const json& other = *doc.find("otherData");
  CHECK(other.string_or("byteps_role", "") == "worker");
  CHECK(other.number_or("byteps_rank", -1) == 3);
  CHECK(other.number_or("clock_offset_us", 0) == Approx(1.5));
  CHECK(other.number_or("clock_samples", 0) == 4);

  const auto tensor = events_named(doc, "X", "w\"eird");
  REQUIRE(tensor.size() == 1);
  CHECK(tensor[0]->number_or("pid", 0) == 1003);
  const double t0 = tensor[0]->number_or("ts", 0), t1 = t0 + tensor[0]->number_or("dur", 0);
  for (const char* stage : {"queue", "push", "pull"}) {
    const auto spans = events_named(doc, "X", stage);
    REQUIRE(spans.size() == 2);
    for (const json* s : spans) {
      CHECK(s->number_or("ts", 0) >= t0);
      CHECK(s->number_or("ts", 0) + s->number_or("dur", 0) <= t1 + 1e-3);
      CHECK(s->find("args")->number_or("round", -1) == 0);
    }
  }
  // Flows carry the ids the server computes from (worker 1, key 42, part, round 0).
  const auto starts = events_named(doc, "s", "push");
  const auto finishes = events_named(doc, "f", "pull");
  REQUIRE(starts.size() == 2);
  REQUIRE(finishes.size() == 2);
  CHECK(starts[0]->string_or("id", "") ==
        fmt::format("{:#x}", bps::detail::trace_flow_id(1, 42, 0, 0, true)));
  CHECK(finishes[1]->string_or("id", "") ==
        fmt::format("{:#x}", bps::detail::trace_flow_id(1, 42, 1, 0, false)));
  CHECK(finishes[0]->string_or("bp", "") == "e");
  // Lanes are named: the tensor's, then one per partition.
  std::map<double, std::string> lanes;
  for (const auto* m : events_named(doc, "M", "thread_name"))
    lanes[m->number_or("tid", 0)] = m->find("args")->string_or("name", "");
  CHECK(lanes == std::map<double, std::string>{
                     {1, "w\"eird"}, {2, "w\"eird part 0"}, {3, "w\"eird part 1"}});
}

TEST_CASE("trace: clock_sync keeps the sample with the shortest round trip", "[trace]") {
  bps::detail::clock_sync c;
  CHECK(c.best().samples == 0);
  c.sample(1000, 51000, 3000);    // rtt 2000: offset 51000 - 2000 = 49000
  c.sample(10000, 60400, 10800);  // rtt 800: offset 60400 - 10400 = 50000
  c.sample(20000, 70000, 29000);  // rtt 9000
  c.sample(5000, 0, 4000);        // answer before the probe left: ignored
  const auto b = c.best();
  CHECK(b.samples == 3);
  CHECK(b.rtt_ns == 800);
  CHECK(b.offset_ns == 50000);
}
