// The timeline of a whole job: 2 workers and 2 servers record steps 1 and 2 of 5; every file is
// parsed and its spans, lanes and flows checked against what the job did, then merged and
// summarised as byteps-trace does.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "faulty_cluster.hpp"
#include "trace/trace_job.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;
using bps::trace_tool::json;

namespace {

namespace fs = std::filesystem;

struct span {
  std::string lane, name;
  double begin = 0, end = 0;
  std::int64_t round = -1;
};

// The spans of one node's file, with their lanes' names.
std::vector<span> spans_of(const json& doc) {
  std::map<double, std::string> lanes;
  for (const auto& e : doc.find("traceEvents")->items)
    if (e.string_or("ph", "") == "M" && e.string_or("name", "") == "thread_name")
      lanes[e.number_or("tid", 0)] = e.find("args")->string_or("name", "");
  std::vector<span> out;
  for (const auto& e : doc.find("traceEvents")->items) {
    if (e.string_or("ph", "") != "X") continue;
    span s;
    s.lane = lanes.at(e.number_or("tid", 0));
    s.name = e.string_or("name", "");
    s.begin = e.number_or("ts", 0);
    s.end = s.begin + e.number_or("dur", 0);
    s.round = static_cast<std::int64_t>(e.find("args")->number_or("round", -1));
    out.push_back(s);
  }
  return out;
}

constexpr double slack_us = 0.0015;  // timestamps are printed to the nanosecond

// Per lane and round, the stages in their order must follow one another.
void check_sequence(const std::vector<span>& spans, const std::vector<std::string>& order) {
  std::map<std::pair<std::string, std::int64_t>, std::map<std::string, span>> by_lane;
  for (const auto& s : spans) by_lane[{s.lane, s.round}][s.name] = s;
  for (const auto& [lane, stages] : by_lane) {
    if (!stages.contains(order.front())) continue;  // a tensor's own lane
    for (std::size_t i = 0; i + 1 < order.size(); ++i) {
      INFO(lane.first << " round " << lane.second << ": " << order[i] << " then " << order[i + 1]);
      REQUIRE(stages.contains(order[i]));
      REQUIRE(stages.contains(order[i + 1]));
      CHECK(stages.at(order[i]).end <= stages.at(order[i + 1]).begin + slack_us);
    }
  }
}

}  // namespace

TEST_CASE(
    "timeline: 2 workers x 2 servers trace steps 1-2 - spans nest, flows pair, merge and "
    "summary count them",
    "[cluster][trace]") {
  const fs::path dir = fs::temp_directory_path() / ("bps-trace-job-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto cfg = test::traced_config(2, 2, dir.string(), 1, 3);
  cfg.partition_bytes = 16384;
  cfg.heartbeat_interval = std::chrono::milliseconds(50);  // a few clock probes on heartbeats
  const std::size_t a_count = 1000, b_count = 10000;
  const std::size_t a_parts = partition::by_bytes(cfg).split(a_count * 4, 4).size();
  const std::size_t b_parts = partition::by_bytes(cfg).split(b_count * 4, 4).size();
  REQUIRE(a_parts == 1);
  REQUIRE(b_parts == 3);
  const std::size_t parts = a_parts + b_parts, workers = 2, traced_rounds = 2;

  cluster c(cfg);
  c.run_workers([&](comm_t& comm, int rank) {
    std::vector<float> a(a_count), b(b_count);
    for (int round = 0; round < 5; ++round) {
      std::fill(a.begin(), a.end(), static_cast<float>(rank + 1));
      std::fill(b.begin(), b.end(), static_cast<float>(round));
      auto ha = comm.push_pull("a", std::span(a), {.priority = 1});  // the first tensor: steps
      auto hb = comm.push_pull("b", std::span(b));
      ha.wait();
      hb.wait();
      BPS_EXPECT(a[7] == 3.0f && b[b_count - 1] == 2.0f * static_cast<float>(round),
                 "round {}: wrong sums {} {}", round, a[7], b[b_count - 1]);
    }
  });

  std::set<std::string> files;
  for (const auto& f : fs::directory_iterator(dir)) files.insert(f.path().filename().string());
  CHECK(files ==
        std::set<std::string>{"server-0.json", "server-1.json", "worker-0.json", "worker-1.json"});
  const auto nodes = trace_tool::read_dir(dir.string());
  REQUIRE(nodes.size() == 4);

  std::map<std::string, std::size_t> server_stage_spans;
  for (const auto& n : nodes) {
    INFO(n.path);
    CHECK(n.clock_samples >= 3);  // the probes at connect, at least
    CHECK(std::abs(n.clock_offset_us) <= n.clock_rtt_us / 2 + 1000);  // one steady clock here
    const auto spans = spans_of(n.doc);
    if (n.name.starts_with("server")) {
      for (const auto& s : spans) ++server_stage_spans[s.name];
      check_sequence(spans, {"receive", "sum", "wait", "answer"});
      continue;
    }
    // A worker: a span per tensor operation in the window, a queue, push and pull span per
    // partition of each, inside its tensor's span of the same round.
    std::map<std::pair<std::string, std::int64_t>, span> tensor_spans;
    std::map<std::string, std::size_t> stage_count;
    for (const auto& s : spans) {
      CHECK((s.round == 1 || s.round == 2));
      if (s.name == s.lane)
        tensor_spans[{s.name, s.round}] = s;
      else
        ++stage_count[s.name];
    }
    CHECK(tensor_spans.size() == 2 * traced_rounds);
    CHECK(stage_count == std::map<std::string, std::size_t>{{"queue", traced_rounds * parts},
                                                            {"push", traced_rounds * parts},
                                                            {"pull", traced_rounds * parts}});
    for (const auto& s : spans) {
      if (s.name == s.lane) continue;
      const auto tensor = s.lane.substr(0, s.lane.find(" part "));
      INFO(s.lane << " " << s.name << " round " << s.round);
      REQUIRE(tensor_spans.contains({tensor, s.round}));
      const auto& t = tensor_spans.at({tensor, s.round});
      CHECK(s.begin >= t.begin - slack_us);
      CHECK(s.end <= t.end + slack_us);
    }
    check_sequence(spans, {"queue", "push", "pull"});
  }
  const std::size_t per_stage = workers * traced_rounds * parts;
  CHECK(server_stage_spans == std::map<std::string, std::size_t>{{"receive", per_stage},
                                                                 {"sum", per_stage},
                                                                 {"wait", per_stage},
                                                                 {"answer", per_stage}});

  // Merged: every flow has one start and one finish, and none ends before it began by more
  // than the clocks' uncertainty.
  std::string text;
  trace_tool::write_json(trace_tool::merge(nodes), text);
  const json job = trace_tool::parse_json(text, "merged");
  double uncertainty_us = 1;
  for (const auto& n : nodes) uncertainty_us += n.clock_rtt_us;
  std::map<std::string, std::vector<double>> starts, finishes;
  for (const auto& e : job.find("traceEvents")->items) {
    const auto ph = e.string_or("ph", "");
    if (ph == "s") starts[e.string_or("id", "")].push_back(e.number_or("ts", 0));
    if (ph == "f") finishes[e.string_or("id", "")].push_back(e.number_or("ts", 0));
  }
  const std::size_t flows = 2 * per_stage;  // to the server and back, per pushed partition
  CHECK(starts.size() == flows);
  CHECK(finishes.size() == flows);
  for (const auto& [id, ts] : starts) {
    INFO("flow " << id);
    REQUIRE(ts.size() == 1);
    REQUIRE(finishes.contains(id));
    REQUIRE(finishes.at(id).size() == 1);
    CHECK(finishes.at(id)[0] >= ts[0] - uncertainty_us);
  }

  const auto s = trace_tool::summarize(job);
  CHECK(s.nodes == 4);
  CHECK(s.tensor_spans == workers * traced_rounds * 2);
  CHECK(s.spans == s.tensor_spans + 3 * per_stage + 4 * per_stage);
  CHECK(s.flows_started == flows);
  CHECK(s.flows_finished == flows);
  CHECK(s.flows_paired == flows);
  REQUIRE(s.tensors.size() == 2);
  CHECK(s.tensors[0].spans == workers * traced_rounds);
  std::map<std::string, std::size_t> stages;
  for (const auto& st : s.stages) stages[st.role + " " + st.stage] = st.spans;
  CHECK(stages == std::map<std::string, std::size_t>{{"worker queue", per_stage},
                                                     {"worker push", per_stage},
                                                     {"worker pull", per_stage},
                                                     {"server receive", per_stage},
                                                     {"server sum", per_stage},
                                                     {"server wait", per_stage},
                                                     {"server answer", per_stage}});
  double worker_share = 0;
  for (const auto& st : s.stages)
    if (st.role == "worker") worker_share += st.share;
  CHECK(worker_share == Approx(1.0));
  REQUIRE(s.servers.size() == 2);
  CHECK(s.servers[0].partitions + s.servers[1].partitions == per_stage);
  const auto report = trace_tool::format_summary(s, 5);
  CHECK(
      report.starts_with(fmt::format("4 nodes, {} spans ({} tensor operations), {} flows "
                                     "started, {} finished, {} paired",
                                     s.spans, s.tensor_spans, flows, flows, flows)));
  fs::remove_all(dir);
}

TEST_CASE(
    "timeline: 2 machines x 2 local ranks - each partition goes local_reduce, queue, push, "
    "pull, local_gather inside its tensor's span",
    "[cluster][trace][local]") {
  const fs::path dir =
      fs::temp_directory_path() / ("bps-trace-local-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto cfg = test::traced_config(2, 1, dir.string(), 1, 3);
  cfg.partition_bytes = 4096;
  const std::size_t count = 4096, traced_rounds = 2;  // 2 slices of 2 partitions each

  cluster c(cfg);
  c.run_local<test::host_comm_t>({2, 2}, [&](test::host_comm_t& comm) {
    std::vector<float> a(count);
    for (int round = 0; round < 5; ++round) {
      std::fill(a.begin(), a.end(), static_cast<float>(comm.rank() + round));
      comm.push_pull("a", std::span(a)).wait();
      const float want = static_cast<float>(0 + 1 + 2 + 3 + 4 * round);
      BPS_EXPECT(a[0] == want && a[count - 1] == want, "round {}: sum {}, want {}", round, a[0],
                 want);
    }
  });

  const auto nodes = trace_tool::read_dir(dir.string());
  REQUIRE(nodes.size() == 5);  // 4 worker processes, 1 server
  std::size_t workers = 0;
  for (const auto& n : nodes) {
    if (!n.name.starts_with("worker")) continue;
    ++workers;
    INFO(n.path);
    // Per round: the operation's span on lane "a", and on lane "a part i" each partition of the
    // whole tensor: the two this local rank owns with every stage, the others gathered only.
    const auto spans = spans_of(n.doc);
    std::map<std::int64_t, std::map<std::string, std::map<std::string, span>>> by_round;
    for (const auto& s : spans) {
      CHECK((s.round == 1 || s.round == 2));
      CHECK_FALSE(by_round[s.round][s.lane].contains(s.name));
      by_round[s.round][s.lane][s.name] = s;
    }
    REQUIRE(by_round.size() == traced_rounds);
    for (const auto& [round, lanes] : by_round) {
      INFO("round " << round);
      REQUIRE(lanes.contains("a"));
      CHECK(lanes.size() == 5);
      const span& whole = lanes.at("a").at("a");
      std::size_t owned = 0;
      for (int i = 0; i < 4; ++i) {
        const auto lane = fmt::format("a part {}", i);
        REQUIRE(lanes.contains(lane));
        const auto& stages = lanes.at(lane);
        REQUIRE(stages.contains("local_gather"));
        if (stages.size() == 1) continue;
        ++owned;
        CHECK(stages.size() == 5);
        for (const auto& [name, s] : stages) {
          CHECK(s.begin >= whole.begin - slack_us);
          CHECK(s.end <= whole.end + slack_us);
        }
      }
      CHECK(owned == 2);
    }
    check_sequence(spans, {"local_reduce", "queue", "push", "pull", "local_gather"});
  }
  CHECK(workers == 4);

  std::string text;
  trace_tool::write_json(trace_tool::merge(nodes), text);
  const auto s = trace_tool::summarize(trace_tool::parse_json(text, "merged"));
  std::map<std::string, std::size_t> stages;
  for (const auto& st : s.stages) stages[st.role + " " + st.stage] = st.spans;
  CHECK(stages.at("worker local_reduce") == workers * traced_rounds * 2);
  CHECK(stages.at("worker local_gather") == workers * traced_rounds * 4);
  fs::remove_all(dir);
}

TEST_CASE(
    "timeline: 2 machines x 2 local ranks, 16 MiB in 16 partitions - a partition is pushed "
    "while later ones are reduced, and gathered while later ones are pulled",
    "[cluster][trace][local]") {
  const fs::path dir =
      fs::temp_directory_path() / ("bps-trace-overlap-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto cfg = test::traced_config(2, 2, dir.string(), 1, 4);
  cfg.partition_bytes = 1 << 20;
  const std::size_t count = (16 << 20) / sizeof(float);

  // Each slice's last partition (7 of 0-7) leaves its worker 300 ms late, so a rank's last
  // pull ends long after its first sum came back: without that, on a loaded machine every
  // answer of a round could arrive before the local stage's thread first woke to gather.
  using comm_t = Communicator<test::faulty_tcp, local::host, partition::by_bytes,
                              schedule::priority>;
  auto plan = std::make_shared<transport::fault_plan>();
  plan->add({.when = {.type = wire::msg::push, .from = role::worker, .part = 7},
             .action = transport::fault::delay(std::chrono::milliseconds(300)),
             .times = transport::fault_rule::always});
  cluster c(cfg);
  c.run_local<comm_t>({2, 2}, [&](comm_t& comm) {
    std::vector<float> a(count);
    for (int round = 0; round < 4; ++round) {
      std::fill(a.begin(), a.end(), static_cast<float>(comm.rank() + round));
      comm.push_pull("big", std::span(a)).wait();
      const float want = static_cast<float>(0 + 1 + 2 + 3 + 4 * round);
      BPS_EXPECT(a[0] == want && a[count / 2] == want && a[count - 1] == want,
                 "round {}: sum {}, want {}", round, a[0], want);
    }
  }, true, [&](const Config& wc) {
    return std::make_unique<comm_t>(wc, test::transport_options<test::faulty_tcp>(wc, plan));
  });

  std::size_t workers = 0;
  for (const auto& n : trace_tool::read_dir(dir.string())) {
    if (!n.name.starts_with("worker")) continue;
    ++workers;
    INFO(n.path);
    // By round, by partition (of the whole tensor: 2 slices x 8), the span of each stage.
    std::map<std::int64_t, std::map<int, std::map<std::string, span>>> parts;
    for (const auto& s : spans_of(n.doc)) {
      if (!s.lane.starts_with("big part ")) continue;
      parts[s.round][std::stoi(s.lane.substr(9))][s.name] = s;
    }
    REQUIRE(parts.size() == 3);
    for (const auto& [round, by_part] : parts) {
      INFO("round " << round);
      REQUIRE(by_part.size() == 16);
      std::vector<int> owned;
      double last_pull_end = 0;
      for (const auto& [i, stages] : by_part)
        if (stages.contains("push")) {
          owned.push_back(i);
          last_pull_end = std::max(last_pull_end, stages.at("pull").end);
        }
      REQUIRE(owned.size() == 8);
      const auto& first = by_part.at(owned.front());
      const auto& last = by_part.at(owned.back());
      CHECK(first.at("push").begin < last.at("local_reduce").end);
      // The first partition this rank owns (partition 0 on local rank 0) is gathered while its
      // later ones are pulled. A partition another local rank owns waits for that rank's pull,
      // which may end after all of this rank's.
      CHECK(first.at("local_gather").begin < last_pull_end);
    }
  }
  CHECK(workers == 4);
  fs::remove_all(dir);
}
