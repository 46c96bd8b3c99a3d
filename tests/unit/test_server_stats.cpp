#include <byteps/server/stats.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

// The server's periodic line: its numbers per second, and the workers behind, longest first.

using bps::server::throughput;
using bps::server::worker_lag;
using namespace std::chrono_literals;

TEST_CASE("throughput counts what moved since the last take and starts over", "[server][stats]") {
  throughput t;
  const auto start = throughput::clock::now();
  (void)t.take(start);
  t.received(3'000'000);
  t.received(1'000'000);
  t.sent(2'000'000);
  t.round_done();
  t.round_done();
  const auto i = t.take(start + 2s);
  CHECK(i.seconds == Approx(2.0));
  CHECK(i.bytes_in == 4'000'000);
  CHECK(i.bytes_out == 2'000'000);
  CHECK(i.rounds == 2);
  const auto j = t.take(start + 3s);
  CHECK(j.seconds == Approx(1.0));
  CHECK(j.bytes_in == 0);
  CHECK(j.rounds == 0);
  // Restarting the clock keeps what was counted.
  t.received(5);
  t.restart_clock(start + 10s);
  const auto k = t.take(start + 12s);
  CHECK(k.seconds == Approx(2.0));
  CHECK(k.bytes_in == 5);
}

TEST_CASE("the report line gives rates per second and names the workers behind",
          "[server][stats]") {
  throughput::interval i;
  i.seconds = 2.0;
  i.bytes_in = 4'000'000;
  i.bytes_out = 3'000'000;
  i.rounds = 40;
  std::vector<worker_lag> lag(4);
  CHECK(bps::server::report_line(i, lag) ==
        "last 2.000 s: 40 rounds, in 2.000 MB/s, out 1.500 MB/s; no worker behind");
  lag[1] = {1, 500ms};
  lag[3] = {4, 2300ms};
  CHECK(bps::server::report_line(i, lag) ==
        "last 2.000 s: 40 rounds, in 2.000 MB/s, out 1.500 MB/s; behind: worker 3 2.3 s on 4 "
        "partitions, worker 1 0.5 s on 1 partition");
}

TEST_CASE("the report line names at most 8 workers behind", "[server][stats]") {
  throughput::interval i;
  i.seconds = 1.0;
  std::vector<worker_lag> lag(10, worker_lag{1, 1s});
  i.rounds = 1;
  const auto line = bps::server::report_line(i, lag);
  CHECK(line.starts_with("last 1.000 s: 1 round, in 0.000 MB/s"));
  CHECK(line.find("worker 7 ") != std::string::npos);
  CHECK(line.find("worker 8 ") == std::string::npos);
  CHECK(line.ends_with(", 2 more"));
}
