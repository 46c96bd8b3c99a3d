#pragma once
// byteps-trace's work, apart from its command line so that the tests call it directly: read the
// timeline files of a job's nodes (detail/trace.hpp writes them), merge them onto the
// scheduler's clock, and summarise where the time went.

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "json.hpp"

namespace bps::trace_tool {

/// One node's file.
struct node_file {
  std::string path;
  std::string name;            ///< "worker 0"
  double clock_offset_us = 0;  ///< scheduler clock = this node's clock + offset
  double clock_rtt_us = 0;
  int clock_samples = 0;
  json doc;
};

inline json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot open {}", path));
  std::stringstream text;
  text << in.rdbuf();
  json doc = parse_json(text.str(), path);
  const json* events = doc.find("traceEvents");
  if (doc.type != json::kind::object || events == nullptr || events->type != json::kind::array)
    throw std::runtime_error(
        fmt::format("{} is not a Chrome trace: no \"traceEvents\" array", path));
  return doc;
}

inline node_file read_node_file(const std::string& path) {
  node_file n;
  n.path = path;
  n.doc = read_json_file(path);
  const json* other = n.doc.find("otherData");
  if (other == nullptr || other->find("clock_offset_us") == nullptr)
    throw std::runtime_error(
        fmt::format("{} holds no clock offset (otherData.clock_offset_us): "
                    "is it a byteps node's timeline?",
                    path));
  n.name = other->string_or("byteps_node", std::filesystem::path(path).stem().string());
  n.clock_offset_us = other->number_or("clock_offset_us", 0);
  n.clock_rtt_us = other->number_or("clock_rtt_us", 0);
  n.clock_samples = static_cast<int>(other->number_or("clock_samples", 0));
  return n;
}

/// The node files in `dir` (worker-<n>.json, server-<n>.json), workers first, by rank.
inline std::vector<node_file> read_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw std::runtime_error(
        fmt::format("{} is not a folder (give the BYTEPS_TRACE_DIR of the "
                    "job)",
                    dir));
  static const std::regex node_name(R"((worker|server)-(\d+)\.json)");
  std::vector<std::tuple<int, int, std::string>> found;  // (role, rank, path)
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const auto file = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(file, m, node_name))
      found.emplace_back(m[1] == "worker" ? 0 : 1, std::stoi(m[2]), entry.path().string());
  }
  if (found.empty())
    throw std::runtime_error(
        fmt::format("{} holds no worker-<rank>.json or server-<rank>.json; "
                    "did the job run with BYTEPS_TRACE_ON=1 and this "
                    "BYTEPS_TRACE_DIR, and end (files are written at "
                    "shutdown)?",
                    dir));
  std::sort(found.begin(), found.end());
  std::vector<node_file> nodes;
  for (const auto& [r, rank, path] : found) nodes.push_back(read_node_file(path));
  return nodes;
}

/// One trace for the job: every node's events, their times moved onto the scheduler's clock.
inline json merge(const std::vector<node_file>& nodes) {
  json job;
  job.type = json::kind::object;
  json events;
  events.type = json::kind::array;
  json about;
  about.type = json::kind::array;
  for (const auto& n : nodes) {
    for (json e : n.doc.find("traceEvents")->items) {
      if (json* ts = e.find("ts"); ts != nullptr && ts->type == json::kind::number)
        *ts = json::of(ts->number + n.clock_offset_us);
      events.items.push_back(std::move(e));
    }
    json a;
    a.type = json::kind::object;
    a.members = {{"node", json::of(n.name)},
                 {"file", json::of(n.path)},
                 {"clock_offset_us", json::of(n.clock_offset_us)},
                 {"clock_rtt_us", json::of(n.clock_rtt_us)},
                 {"clock_samples", json::of(n.clock_samples, 0)}};
    about.items.push_back(std::move(a));
  }
  json other;
  other.type = json::kind::object;
  other.members = {{"byteps_clock", json::of("scheduler")}, {"byteps_nodes", std::move(about)}};
  job.members = {{"traceEvents", std::move(events)},
                 {"displayTimeUnit", json::of("ms")},
                 {"otherData", std::move(other)}};
  return job;
}

struct stage_stats {
  std::string role, stage;
  std::size_t spans = 0;
  double total_us = 0, share = 0;  ///< share of the role's time in stages
};
struct tensor_stats {
  std::string name;
  std::size_t spans = 0;
  double mean_us = 0, max_us = 0;
};
struct server_stats {
  int server = 0;
  std::size_t partitions = 0;  ///< partition rounds the workers pushed and pulled there
  double round_trip_us = 0;    ///< mean push + pull as the workers saw it
  double busy_us = 0;          ///< mean receive + sum + answer per push, on the server
  double wait_us = 0;          ///< mean wait for the other workers, per push
};
struct summary {
  std::size_t nodes = 0, spans = 0, tensor_spans = 0, flows_started = 0, flows_finished = 0,
              flows_paired = 0;
  std::vector<stage_stats> stages;    // workers' stages, then servers'
  std::vector<tensor_stats> tensors;  // slowest (mean) first
  std::vector<server_stats> servers;  // slowest round trip first
};

/// Where the time went in a job's trace (`merge`'s output, or a single node's file).
inline summary summarize(const json& job) {
  summary s;
  std::map<int, bool> pids;
  std::map<std::pair<std::string, std::string>, stage_stats> stages;
  std::map<std::string, tensor_stats> tensors;
  std::map<int, server_stats> servers;
  std::map<std::pair<int, int>, int> lane_server;    // worker lane -> its partition's server
  std::map<std::string, std::pair<int, int>> flows;  // id -> (starts, finishes)
  struct span {
    int pid, tid;
    std::string name;
    double dur;
  };
  std::vector<span> worker_stage_spans;
  for (const auto& e : job.find("traceEvents")->items) {
    const auto ph = e.string_or("ph", "");
    const int pid = static_cast<int>(e.number_or("pid", 0)),
              tid = static_cast<int>(e.number_or("tid", 0));
    if (ph == "s" || ph == "f") {
      auto& [starts, finishes] = flows[e.string_or("id", "")];
      (ph == "s" ? starts : finishes) += 1;
      continue;
    }
    if (ph != "X") continue;
    pids[pid] = true;
    ++s.spans;
    const auto name = e.string_or("name", ""), cat = e.string_or("cat", "");
    const double dur = e.number_or("dur", 0);
    const bool server = pid >= 2000;
    if (cat == "tensor") {
      ++s.tensor_spans;
      auto& t = tensors[name];
      t.name = name;
      ++t.spans;
      t.mean_us += dur;
      t.max_us = std::max(t.max_us, dur);
      continue;
    }
    auto& st = stages[{server ? "server" : "worker", name}];
    st.role = server ? "server" : "worker";
    st.stage = name;
    ++st.spans;
    st.total_us += dur;
    const json* args = e.find("args");
    if (server) {
      auto& sv = servers[pid - 2000];
      sv.server = pid - 2000;
      if (name == "wait")
        sv.wait_us += dur;
      else
        sv.busy_us += dur;
    } else if (name == "queue" && args != nullptr && args->find("server") != nullptr) {
      lane_server[{pid, tid}] = static_cast<int>(args->number_or("server", 0));
    } else if (name == "push" || name == "pull") {
      worker_stage_spans.push_back({pid, tid, name, dur});
    }
  }
  std::map<int, std::size_t> pushes_summed;  // server -> sum spans, for the per-push means
  for (const auto& e : job.find("traceEvents")->items)
    if (e.string_or("ph", "") == "X" && e.number_or("pid", 0) >= 2000 &&
        e.string_or("name", "") == "sum")
      ++pushes_summed[static_cast<int>(e.number_or("pid", 0)) - 2000];
  for (const auto& w : worker_stage_spans) {
    auto it = lane_server.find({w.pid, w.tid});
    if (it == lane_server.end()) continue;
    auto& sv = servers[it->second];
    sv.server = it->second;
    sv.round_trip_us += w.dur;
    if (w.name == "pull") ++sv.partitions;
  }
  s.nodes = pids.size();
  std::map<std::string, double> role_total;
  for (const auto& [key, st] : stages) role_total[key.first] += st.total_us;
  for (auto& [key, st] : stages) {
    st.share = role_total[key.first] > 0 ? st.total_us / role_total[key.first] : 0;
    s.stages.push_back(st);
  }
  std::stable_sort(s.stages.begin(), s.stages.end(),
                   [](const auto& a, const auto& b) { return a.role > b.role; });  // workers first
  for (auto& [name, t] : tensors) {
    t.mean_us /= static_cast<double>(t.spans);
    s.tensors.push_back(t);
  }
  std::sort(s.tensors.begin(), s.tensors.end(),
            [](const auto& a, const auto& b) { return a.mean_us > b.mean_us; });
  for (auto& [id, sv] : servers) {
    if (sv.partitions > 0) sv.round_trip_us /= static_cast<double>(sv.partitions);
    if (const auto n = pushes_summed[id]; n > 0) {
      sv.busy_us /= static_cast<double>(n);
      sv.wait_us /= static_cast<double>(n);
    }
    s.servers.push_back(sv);
  }
  std::sort(s.servers.begin(), s.servers.end(),
            [](const auto& a, const auto& b) { return a.round_trip_us > b.round_trip_us; });
  for (const auto& [id, f] : flows) {
    s.flows_started += static_cast<std::size_t>(f.first);
    s.flows_finished += static_cast<std::size_t>(f.second);
    s.flows_paired += f.first == 1 && f.second == 1 ? 1 : 0;
  }
  return s;
}

inline std::string format_summary(const summary& s, std::size_t top) {
  std::string out = fmt::format(
      "{} nodes, {} spans ({} tensor operations), {} flows started, {} finished, {} paired\n\n",
      s.nodes, s.spans, s.tensor_spans, s.flows_started, s.flows_finished, s.flows_paired);
  out += "Time per stage (share of the role's time in stages)\n";
  out += fmt::format("  {:<7} {:<8} {:>7} {:>11} {:>7} {:>10}\n", "role", "stage", "spans",
                     "total ms", "share", "mean us");
  for (const auto& st : s.stages)
    out += fmt::format("  {:<7} {:<8} {:>7} {:>11.3f} {:>6.1f}% {:>10.1f}\n", st.role, st.stage,
                       st.spans, st.total_us / 1000, st.share * 100,
                       st.total_us / static_cast<double>(std::max<std::size_t>(st.spans, 1)));
  out += fmt::format("\nSlowest tensors (call to done)\n  {:<32} {:>5} {:>10} {:>10}\n", "tensor",
                     "ops", "mean ms", "max ms");
  for (std::size_t i = 0; i < s.tensors.size() && i < top; ++i)
    out += fmt::format("  {:<32} {:>5} {:>10.3f} {:>10.3f}\n", s.tensors[i].name,
                       s.tensors[i].spans, s.tensors[i].mean_us / 1000, s.tensors[i].max_us / 1000);
  out += fmt::format(
      "\nSlowest servers (per partition round)\n  {:<7} {:>10} {:>22} {:>13} "
      "{:>13}\n",
      "server", "partitions", "push+pull us (workers)", "busy us", "wait us");
  for (std::size_t i = 0; i < s.servers.size() && i < top; ++i)
    out += fmt::format("  {:<7} {:>10} {:>22.1f} {:>13.1f} {:>13.1f}\n", s.servers[i].server,
                       s.servers[i].partitions, s.servers[i].round_trip_us, s.servers[i].busy_us,
                       s.servers[i].wait_us);
  return out;
}

}  // namespace bps::trace_tool
