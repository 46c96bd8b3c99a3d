// byteps-trace: reads the timeline files a byteps job writes with BYTEPS_TRACE_ON=1 (one per
// worker and server, in BYTEPS_TRACE_DIR), merges them onto the scheduler's clock, and says where
// the time went.
#include <byteps/version.hpp>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "trace/plot.hpp"
#include "trace/trace_job.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(
      out,
      "byteps-trace %s: the timeline of a byteps job.\n\n"
      "Usage:\n"
      "  byteps-trace merge DIR [-o FILE]     one Chrome trace for the job, every node's\n"
      "                                       spans on the scheduler's clock (FILE\n"
      "                                       defaults to DIR/job.json); open it in\n"
      "                                       https://ui.perfetto.dev or chrome://tracing\n"
      "  byteps-trace summary DIR|FILE [--top N]\n"
      "                                       time per stage, the N (default 5) slowest\n"
      "                                       tensors and servers\n"
      "  byteps-trace plot DIR|FILE -o PNG    a picture of the trace, a row per lane\n"
      "                                       (needs gnuplot: gnuplot-nox)\n"
      "  byteps-trace --help\n\n"
      "DIR is the job's BYTEPS_TRACE_DIR, holding worker-<rank>.json and\n"
      "server-<rank>.json (written when each node shuts down). Record a trace with\n"
      "BYTEPS_TRACE_ON=1 on every node; BYTEPS_TRACE_START_STEP and\n"
      "BYTEPS_TRACE_END_STEP choose the steps (docs/env.md).\n\n"
      "Exit status: 0 done, 1 the files could not be read or written, 2 usage error.\n",
      bps::version);
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "byteps-trace: %s (see byteps-trace --help)\n", what.c_str());
  return 2;
}

namespace tool = bps::trace_tool;

int merge(const std::vector<std::string_view>& args) {
  std::string dir, out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o" || args[i] == "--output") {
      if (i + 1 >= args.size()) return usage_error("-o needs a file name");
      out = args[++i];
    } else if (dir.empty() && !args[i].starts_with("-")) {
      dir = args[i];
    } else {
      return usage_error(fmt::format("merge: unexpected argument '{}'", args[i]));
    }
  }
  if (dir.empty()) return usage_error("merge needs the folder of the job's timeline files");
  if (out.empty()) out = (std::filesystem::path(dir) / "job.json").string();
  const auto nodes = tool::read_dir(dir);
  std::string text;
  tool::write_json(tool::merge(nodes), text);
  std::ofstream file(out, std::ios::trunc);
  if (!(file << text << '\n').flush())
    throw std::runtime_error(fmt::format("cannot write {}", out));
  std::size_t events = 0;
  for (const auto& n : nodes) events += n.doc.find("traceEvents")->items.size();
  std::printf("byteps-trace: merged %zu nodes (%zu events) into %s\n", nodes.size(), events,
              out.c_str());
  for (const auto& n : nodes)
    std::printf("  %-12s clock offset %+.3f ms (round trip %.3f ms, %d samples)\n", n.name.c_str(),
                n.clock_offset_us / 1000, n.clock_rtt_us / 1000, n.clock_samples);
  return 0;
}

int summary(const std::vector<std::string_view>& args) {
  std::string what;
  std::size_t top = 5;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--top") {
      if (i + 1 >= args.size()) return usage_error("--top needs a number");
      const std::string n(args[++i]);
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos)
        return usage_error(fmt::format("--top '{}' is not a whole number", n));
      top = std::stoul(n);
    } else if (what.empty() && !args[i].starts_with("-")) {
      what = args[i];
    } else {
      return usage_error(fmt::format("summary: unexpected argument '{}'", args[i]));
    }
  }
  if (what.empty()) return usage_error("summary needs a folder of timeline files or a merged file");
  const auto job = std::filesystem::is_directory(what) ? tool::merge(tool::read_dir(what))
                                                       : tool::read_json_file(what);
  std::fputs(tool::format_summary(tool::summarize(job), top).c_str(), stdout);
  return 0;
}

int plot(const std::vector<std::string_view>& args) {
  std::string what, out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o" || args[i] == "--output") {
      if (i + 1 >= args.size()) return usage_error("-o needs a file name");
      out = args[++i];
    } else if (what.empty() && !args[i].starts_with("-")) {
      what = args[i];
    } else {
      return usage_error(fmt::format("plot: unexpected argument '{}'", args[i]));
    }
  }
  if (what.empty() || out.empty())
    return usage_error("plot needs a folder of timeline files or a merged file, and -o PNG");
  if (out.find('\'') != std::string::npos)
    return usage_error("plot: the PNG's name must not contain a single quote (gnuplot's quote)");
  const auto job = std::filesystem::is_directory(what) ? tool::merge(tool::read_dir(what))
                                                       : tool::read_json_file(what);
  tool::plot(job, out);
  std::printf("byteps-trace: drew %s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    usage(stderr);
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h") {
    usage(stdout);
    return 0;
  }
  const std::vector<std::string_view> rest(args.begin() + 1, args.end());
  try {
    if (args[0] == "merge") return merge(rest);
    if (args[0] == "summary") return summary(rest);
    if (args[0] == "plot") return plot(rest);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "byteps-trace: %s\n", e.what());
    return 1;
  }
  return usage_error(fmt::format("unknown command '{}': expected merge, summary or plot", args[0]));
}
