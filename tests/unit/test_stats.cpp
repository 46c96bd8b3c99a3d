// worker::stats_recorder: throughput over the time operations were in flight, in a window.

#include <byteps/worker/stats.hpp>
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <thread>

using namespace bps;
using worker::stats_recorder;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST_CASE("stats: busy time is the union of overlapping in-flight intervals", "[stats]") {
  const auto t0 = clock_type::now();
  auto at = [&](int ms) { return t0 + milliseconds(ms); };
  std::vector<std::pair<clock_type::time_point, clock_type::time_point>> spans = {
      {at(100), at(200)},
      {at(0), at(50)},
      {at(150), at(300)},
      {at(400), at(450)},
      {at(410), at(420)}};
  // [0 50] + [100 300] + [400 450] = 50 + 200 + 50 ms
  CHECK(stats_recorder::union_seconds(spans) == Approx(0.300).margin(1e-9));
  std::vector<std::pair<clock_type::time_point, clock_type::time_point>> none;
  CHECK(stats_recorder::union_seconds(none) == 0.0);
}

TEST_CASE("stats: a snapshot sums operations and bytes per tensor - most bytes first", "[stats]") {
  stats_recorder r(std::chrono::seconds(60));
  r.servers(2);
  const std::string a = "a", b = "b";
  worker::op_timing t;
  t.started = clock_type::now() - milliseconds(20);
  for (int part = 0; part < 2; ++part) {
    t.stages.add(stage::queue, 0.001);
    t.stages.add(stage::push, 0.002);
    t.stages.add(stage::pull, 0.003);
  }
  r.operation(a, 1000, t);
  r.operation(b, 5000, t);
  r.operation(a, 1000, t);
  r.pushed(0, 700);
  r.pushed(1, 300);
  r.pushed(7, 1);  // no such server: ignored
  auto s = r.snapshot(3);
  CHECK(s.operations == 3);
  CHECK(s.bytes == 7000);
  CHECK(s.stages[stage::push].partitions == 6);
  CHECK(s.mean_seconds(stage::queue) == Approx(0.001));
  CHECK(s.mean_seconds(stage::push) == Approx(0.002));
  CHECK(s.mean_seconds(stage::pull) == Approx(0.003));
  CHECK(s.stages[stage::local_reduce].partitions == 0);
  CHECK(s.mean_seconds(stage::local_reduce) == 0.0);
  // The local stage's times come on their own, once its operation is done.
  stage_times local;
  local.add(stage::local_reduce, 0.004);
  local.add(stage::local_gather, 0.005);
  local.add(stage::local_gather, 0.007);
  r.local_steps(local);
  s = r.snapshot(3);
  CHECK(s.stages[stage::local_reduce].partitions == 1);
  CHECK(s.mean_seconds(stage::local_reduce) == Approx(0.004));
  CHECK(s.stages[stage::local_gather].partitions == 2);
  CHECK(s.mean_seconds(stage::local_gather) == Approx(0.006));
  CHECK(s.operations == 3);  // stage times alone are no operation
  CHECK(s.mean_seconds(stage::pull) == Approx(0.003));
  CHECK(s.in_flight == 3);
  CHECK(s.bytes_per_server == std::vector<std::uint64_t>{700, 300});
  REQUIRE(s.tensors.size() == 2);
  CHECK(s.tensors[0].name == "b");
  CHECK(s.tensors[0].bytes == 5000);
  CHECK(s.tensors[1].name == "a");
  CHECK(s.tensors[1].operations == 2);
  CHECK(s.busy_seconds > 0.0);
  CHECK(s.bytes_per_second() == Approx(7000 / s.busy_seconds));
}

TEST_CASE("stats: operations older than the window are forgotten, and since_start keeps them",
          "[stats]") {
  stats_recorder r(milliseconds(50));
  const std::string a = "a", b = "b";
  worker::op_timing t;
  t.started = clock_type::now() - milliseconds(20);
  t.stages.add(stage::push, 0.002);
  t.stages.add(stage::pull, 0.003);
  r.operation(a, 1000, t);
  r.operation(b, 3000, t);
  stage_times local;
  local.add(stage::local_reduce, 0.004);
  r.local_steps(local);
  std::this_thread::sleep_for(milliseconds(120));
  auto s = r.snapshot(0);
  CHECK(s.operations == 0);
  CHECK(s.stages[stage::pull].partitions == 0);
  CHECK(s.stages[stage::local_reduce].partitions == 0);
  CHECK(s.bytes == 0);
  CHECK(s.busy_seconds == 0.0);
  CHECK(s.bytes_per_second() == 0.0);
  CHECK(s.window_seconds == Approx(0.05));
  const auto& total = s.since_start;
  CHECK(total.operations == 2);
  CHECK(total.bytes == 4000);
  CHECK(total.stages[stage::push].partitions == 2);
  CHECK(total.mean_seconds(stage::pull) == Approx(0.003));
  CHECK(total.stages[stage::local_reduce].partitions == 1);
  // Both ran over the same 20 ms (and the few microseconds between their ends): counted once.
  CHECK(total.busy_seconds >= 0.020);
  CHECK(total.busy_seconds < 0.030);
  CHECK(total.bytes_per_second() == Approx(4000 / total.busy_seconds));
  CHECK(total.seconds >= 0.120);
}

TEST_CASE("stats: running_union equals the union of intervals that arrive in order of their "
          "ends, and settles its oldest runs past its bound",
          "[stats]") {
  const auto t0 = clock_type::now();
  auto at = [&](int ms) { return t0 + milliseconds(ms); };
  using span = std::pair<clock_type::time_point, clock_type::time_point>;
  // Seeded intervals, ends increasing, starts reaching back over 0-3 earlier ones.
  std::uint32_t seed = 12345;
  auto next = [&](std::uint32_t n) {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<int>((seed >> 8) % n);
  };
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<span> all;
    worker::running_union u;
    int end = 0;
    for (int i = 0; i < 40; ++i) {
      end += next(30);
      const int start = std::max(0, end - next(120));
      all.emplace_back(at(start), at(end));
      u.add(at(start), at(end));
    }
    const double exact = stats_recorder::union_seconds(all);
    CHECK(u.seconds() == Approx(exact).margin(1e-9));
  }
  // Bound 2: [0 10] [20 30] [40 50] settles [0 10]; [5 60] then counts from 10, which is exact
  // here ([0 60]); one reaching back over a settled gap would count that gap as idle.
  worker::running_union small(2);
  small.add(at(0), at(10));
  small.add(at(20), at(30));
  small.add(at(40), at(50));
  CHECK(small.seconds() == Approx(0.030).margin(1e-9));
  small.add(at(5), at(60));
  CHECK(small.seconds() == Approx(0.060).margin(1e-9));
  worker::running_union none;
  CHECK(none.seconds() == 0.0);
}
