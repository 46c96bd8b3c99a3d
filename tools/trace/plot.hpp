#pragma once
// byteps-trace plot: a picture of a job's trace for a README or a bug report, drawn by gnuplot
// (Debian's gnuplot-nox, which the benchmarks' plots use too): one row per lane, top to bottom
// in the order of the files (workers, then servers), a bar per span coloured by its stage.

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "json.hpp"

namespace bps::trace_tool {

/// The colour of each stage (and of a tensor's whole span), in the legend's order.
inline const std::vector<std::pair<std::string, unsigned>>& stage_colours() {
  static const std::vector<std::pair<std::string, unsigned>> colours = {
      {"tensor", 0xb0b0b0},       {"local_reduce", 0x8c564b}, {"copy_out", 0xbcbd22},
      {"encode", 0x7f7f7f},       {"queue", 0xe6c300},        {"push", 0x1f77b4},
      {"pull", 0x2ca02c},         {"decode", 0xaec7e8},       {"copy_in", 0xdbdb8d},
      {"local_gather", 0xe377c2}, {"receive", 0x17becf},      {"sum", 0xd62728},
      {"wait", 0xe0e0e0},         {"answer", 0x9467bd}};
  return colours;
}

/// What `plot` asks gnuplot to draw.
struct plot_layout {
  std::string png;   ///< the picture
  std::string data;  ///< the bars: row, begin and end (ms), colour
  int width = 1600;
  int rows = 0;
  double span_ms = 0;
  std::string ytics;  ///< gnuplot's ytics list: "label" row, ...
};

/// The gnuplot script for `layout`. Text is printed as written (`noenhanced`): in gnuplot's
/// enhanced mode the underscore of "local_reduce" would lower the rest of the name.
inline std::string gnuplot_script(const plot_layout& layout) {
  std::string legend;
  for (const auto& [stage, colour] : stage_colours())
    legend += fmt::format(", NaN with boxes lc rgb '#{:06x}' title '{}'", colour, stage);
  const int height = std::max(320, 15 * layout.rows + 140);
  return fmt::format(
      "set terminal png noenhanced size {},{} font ',9'\n"
      "set output '{}'\n"
      "set title 'byteps timeline: {} lanes, {:.1f} ms on the scheduler clock'\n"
      "set xlabel 'ms'\nset xrange [0:{:.4f}]\nset yrange [0.4:{}.6]\n"
      "set ytics ({}) font ',7'\nset grid xtics\nset style fill solid 1.0 noborder\n"
      "set key outside right top\n"
      "plot '{}' using (($2+$3)/2):1:(($3-$2)/2):(0.38):4 with boxxyerror lc rgb variable "
      "notitle{}\n",
      layout.width, height, layout.png, layout.rows, layout.span_ms, layout.span_ms, layout.rows,
      layout.ytics, layout.data, legend);
}

/// Draws `job` into the PNG `png` (gnuplot must be on PATH). Throws `std::runtime_error`
/// saying what failed.
inline void plot(const json& job, const std::string& png, int width = 1600) {
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> lane_names;
  for (const auto& e : job.find("traceEvents")->items) {
    if (e.string_or("ph", "") != "M") continue;
    const int pid = static_cast<int>(e.number_or("pid", 0)),
              tid = static_cast<int>(e.number_or("tid", 0));
    const auto name = e.find("args") ? e.find("args")->string_or("name", "") : std::string();
    if (e.string_or("name", "") == "process_name") processes[pid] = name;
    if (e.string_or("name", "") == "thread_name") lane_names[{pid, tid}] = name;
  }
  struct bar {
    std::pair<int, int> lane;
    double begin, end;
    unsigned colour;
  };
  std::vector<bar> bars;
  double first = std::numeric_limits<double>::max(), last = 0;
  for (const auto& e : job.find("traceEvents")->items) {
    if (e.string_or("ph", "") != "X") continue;
    const auto stage = e.string_or("cat", "") == "tensor" ? "tensor" : e.string_or("name", "");
    unsigned colour = 0x000000;
    for (const auto& [s, c] : stage_colours())
      if (s == stage) colour = c;
    const double ts = e.number_or("ts", 0), dur = e.number_or("dur", 0);
    bars.push_back(
        {{static_cast<int>(e.number_or("pid", 0)), static_cast<int>(e.number_or("tid", 0))},
         ts,
         ts + dur,
         colour});
    first = std::min(first, ts);
    last = std::max(last, ts + dur);
  }
  if (bars.empty()) throw std::runtime_error("the trace holds no spans to draw");
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    throw std::runtime_error(
        "gnuplot is not on PATH: install gnuplot-nox (apt-get install "
        "gnuplot-nox, or scripts/install-bench-deps.sh) to draw a picture");
  std::map<std::pair<int, int>, int> row;  // lane -> row, top (highest) first
  for (const auto& b : bars) row[b.lane] = 0;
  int next = static_cast<int>(row.size());
  std::string ytics;
  for (auto& [lane, y] : row) {
    y = next--;
    auto label = fmt::format("{}: {}", processes[lane.first], lane_names[lane]);
    std::replace(label.begin(), label.end(), '"', '\'');
    ytics += fmt::format("{}\"{}\" {}", ytics.empty() ? "" : ", ", label, y);
  }
  const auto data = png + ".dat", script = png + ".gp";
  {
    std::ofstream d(data, std::ios::trunc);
    for (const auto& b : bars)
      d << fmt::format("{} {:.4f} {:.4f} {}\n", row[b.lane], (b.begin - first) / 1000,
                       (b.end - first) / 1000, b.colour);
    if (!d.flush()) throw std::runtime_error(fmt::format("cannot write {}", data));
  }
  {
    std::ofstream g(script, std::ios::trunc);
    g << gnuplot_script({png, data, width, static_cast<int>(row.size()), (last - first) / 1000,
                         ytics});
    if (!g.flush()) throw std::runtime_error(fmt::format("cannot write {}", script));
  }
  const int status = std::system(fmt::format("gnuplot '{}' 2>&1", script).c_str());
  std::filesystem::remove(data);
  std::filesystem::remove(script);
  if (status != 0)
    throw std::runtime_error(fmt::format(
        "gnuplot failed (status {}) drawing {}; is it installed (apt-get install gnuplot-nox, "
        "or scripts/install-bench-deps.sh)?",
        status, png));
}

}  // namespace bps::trace_tool
