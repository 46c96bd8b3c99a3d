#pragma once
// The flags every benchmark shares (bench::options, parse_common), the size sweep, and the
// performance model's bound from ../shared/MISSION.md. Part of common.hpp.
#include <byteps/core/dtype.hpp>
#include <byteps/reduce/half.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
namespace bench {

class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------- sizes and flags

/// "4096", "4K", "4KiB", "256M", "1G" (binary multiples; "KB"/"MB"/"GB" are binary too).
inline std::size_t parse_bytes(std::string_view text) {
  std::size_t i = 0;
  std::uint64_t v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    v = v * 10 + static_cast<std::uint64_t>(text[i] - '0');
    ++i;
  }
  if (i == 0) throw usage_error("'" + std::string(text) + "' is not a size (e.g. 4096, 4K, 256M)");
  std::string unit(text.substr(i));
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::uint64_t mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1ull << 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1ull << 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1ull << 30;
  else throw usage_error("'" + std::string(text) + "': unknown unit (use K, M or G)");
  return static_cast<std::size_t>(v * mult);
}

inline std::string format_bytes(std::size_t b) {
  char buf[32];
  if (b >= (1u << 30) && b % (1u << 30) == 0) std::snprintf(buf, sizeof buf, "%zuG", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0) std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else if (b >= (1u << 10) && b % (1u << 10) == 0) std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu", b);
  return buf;
}

inline std::optional<bps::dtype> dtype_from_name(std::string_view s) {
  if (s == "fp32" || s == "float") s = "float32";
  if (s == "fp64" || s == "double") s = "float64";
  if (s == "fp16" || s == "half") s = "float16";
  if (s == "bf16") s = "bfloat16";
  for (bps::dtype t : bps::all_dtypes)
    if (bps::dtype_name(t) == s) return t;
  return std::nullopt;
}

/// The performance model's topologies (../shared/MISSION.md, "the performance model").
enum class topology { none, ps, colocated, ring, mixed };

inline std::string_view topology_name(topology t) {
  switch (t) {
    case topology::none: return "none";
    case topology::ps: return "ps";
    case topology::colocated: return "colocated";
    case topology::ring: return "ring";
    case topology::mixed: return "mixed";
  }
  return "?";
}

/// Lower bound on the time to all-reduce `bytes` over n workers with links of `link_Bps`
/// bytes/s (full duplex):
///   ps        k separate servers:      max(M/B, n*M/(k*B))
///   colocated a server on each worker: 2(n-1)/n * M/B
///   ring      ring all-reduce:         2(n-1)/n * M/B
///   mixed     n colocated + k CPU servers: 2n(n-1)M / ((n^2 + kn - 2k) B)
/// n = 1 moves nothing over the network: the bound is 0 (ratio not shown).
inline double bound_seconds(topology t, int n, int k, double bytes, double link_Bps) {
  if (link_Bps <= 0 || n < 2) return 0;
  const double m_over_b = bytes / link_Bps;
  switch (t) {
    case topology::ps: return std::max(m_over_b, n * m_over_b / std::max(k, 1));
    case topology::colocated:
    case topology::ring: return 2.0 * (n - 1) / n * m_over_b;
    case topology::mixed:
      return 2.0 * n * (n - 1) * bytes / ((double(n) * n + double(k) * n - 2.0 * k) * link_Bps);
    case topology::none: return 0;
  }
  return 0;
}

struct options {
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = std::size_t{256} << 20;
  double step_factor = 2;
  std::vector<bps::dtype> dtypes{bps::dtype::float32};
  int iters = 20;
  int warmup = 5;
  bool check = true;
  topology topo = topology::none;
  double link_gbps = 0;  // 0: unknown (time/bound not printed)
  int servers = -1;      // k in the bound; -1: the program's own default
  std::string label;     // optional: printed in the header comment (e.g. "byteps ps 4w+4s")
  std::string times_dir; // optional: each rank's barrier exit and end per iteration (--times)
};

/// Help text for the flags every benchmark shares.
inline const char* common_help() {
  return
      "  --min-bytes N      smallest size (default 4K; K, M, G are binary multiples)\n"
      "  --max-bytes N      largest size (default 256M)\n"
      "  --step-factor F    multiply the size by F each step (default 2)\n"
      "  --dtype LIST       comma-separated dtypes: float32 (default), float64, float16,\n"
      "                     bfloat16, int8, uint8, int32, int64 (fp32, fp16, bf16 also accepted)\n"
      "  --iters N          timed iterations per size (default 20)\n"
      "  --warmup N         untimed iterations per size first (default 5)\n"
      "  --check 0|1        compare every result with the exact reference sum (default 1);\n"
      "                     the values are small integers that every dtype sums exactly\n"
      "  --topology T       for the time/bound column: ps, colocated, ring or mixed\n"
      "                     (../shared/MISSION.md's model; default: none)\n"
      "  --link-gbps B      each machine's link rate in Gbit/s (full duplex); without it the\n"
      "                     time/bound column is left out (on loopback B is unknown)\n"
      "  --servers K        k in the bound for ps and mixed (default: the job's server count)\n"
      "  --label TEXT       a name for this run, printed in the table's header comment\n"
      "  --times DIR        each rank writes DIR/<name>-rank<R>.txt: a line per iteration with\n"
      "                     the size, the iteration, and the steady clock in ns when the rank\n"
      "                     left the barrier and when its all-reduce returned (ranks of one\n"
      "                     host share that clock; benchmarks/round-spans.sh reads the files)\n";
}

/// Consumes one shared flag at argv[i] (and its value); returns false when it is not one.
inline bool parse_common(options& o, int argc, char** argv, int& i) {
  std::string_view a = argv[i];
  std::string value_storage;
  std::string_view value;
  if (auto eq = a.find('='); a.starts_with("--") && eq != std::string_view::npos) {
    value_storage = std::string(a.substr(eq + 1));
    value = value_storage;
    a = a.substr(0, eq);
  }
  static constexpr std::string_view known[] = {"--min-bytes", "--max-bytes", "--step-factor",
                                               "--dtype",     "--iters",     "--warmup",
                                               "--check",     "--topology",  "--link-gbps",
                                               "--servers",   "--label",     "--times"};
  if (std::find(std::begin(known), std::end(known), a) == std::end(known)) return false;
  if (value.data() == nullptr) {
    if (i + 1 >= argc) throw usage_error(std::string(a) + " needs a value (see --help)");
    value = argv[++i];
  }
  auto integer = [&](int min) {
    char* end = nullptr;
    std::string v(value);
    long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < min)
      throw usage_error(std::string(a) + " '" + v + "': expected a whole number >= " +
                        std::to_string(min));
    return static_cast<int>(n);
  };
  auto real = [&] {
    char* end = nullptr;
    std::string v(value);
    double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(d >= 0))
      throw usage_error(std::string(a) + " '" + v + "': expected a number >= 0");
    return d;
  };
  if (a == "--min-bytes") o.min_bytes = parse_bytes(value);
  else if (a == "--max-bytes") o.max_bytes = parse_bytes(value);
  else if (a == "--step-factor") {
    o.step_factor = real();
    if (o.step_factor <= 1) throw usage_error("--step-factor must be > 1");
  } else if (a == "--dtype") {
    o.dtypes.clear();
    std::string_view rest = value;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      auto name = rest.substr(0, comma);
      auto t = dtype_from_name(name);
      if (!t) throw usage_error("--dtype: unknown dtype '" + std::string(name) + "'");
      o.dtypes.push_back(*t);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
    if (o.dtypes.empty()) throw usage_error("--dtype: no dtype given");
  } else if (a == "--iters") o.iters = integer(1);
  else if (a == "--warmup") o.warmup = integer(0);
  else if (a == "--check") o.check = integer(0) != 0;
  else if (a == "--topology") {
    if (value == "ps") o.topo = topology::ps;
    else if (value == "colocated") o.topo = topology::colocated;
    else if (value == "ring") o.topo = topology::ring;
    else if (value == "mixed") o.topo = topology::mixed;
    else if (value == "none") o.topo = topology::none;
    else throw usage_error("--topology '" + std::string(value) + "': expected ps, colocated, ring, mixed or none");
  } else if (a == "--link-gbps") o.link_gbps = real();
  else if (a == "--servers") o.servers = integer(1);
  else if (a == "--label") o.label = std::string(value);
  else if (a == "--times") o.times_dir = std::string(value);
  return true;
}

inline void validate(const options& o) {
  if (o.min_bytes == 0 || o.max_bytes < o.min_bytes)
    throw usage_error("need 0 < --min-bytes <= --max-bytes");
}

/// min, min*f, ... up to max (max itself always included), each rounded down to a multiple
/// of 8 bytes so that every dtype divides it.
inline std::vector<std::size_t> sweep(const options& o) {
  std::vector<std::size_t> sizes;
  for (double s = static_cast<double>(o.min_bytes); s < static_cast<double>(o.max_bytes) * 1.0001;
       s *= o.step_factor) {
    auto b = static_cast<std::size_t>(s) / 8 * 8;
    if (b == 0) b = 8;
    if (sizes.empty() || b != sizes.back()) sizes.push_back(b);
  }
  if (sizes.back() != o.max_bytes / 8 * 8) sizes.push_back(std::max<std::size_t>(8, o.max_bytes / 8 * 8));
  return sizes;
}

}  // namespace bench
