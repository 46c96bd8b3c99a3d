#pragma once
// What bps-bench, gloo_allreduce and mpi_allreduce share, so that their tables line up:
// command-line flags, the size sweep, test values whose sums every dtype holds exactly, the
// timing loop, the bound from ../shared/MISSION.md's performance model, and the table format.
//
// Table (one row per size, printed by rank 0 on stdout; '#' lines are comments):
//   size count dtype p50_us p99_us algbw_GBps busbw_GBps wrong time/bound
// algbw = size / p50 time, busbw = algbw * 2(n-1)/n (nccl-tests' convention for all-reduce),
// time/bound = p50 time / the model's lower bound for the topology (column left out when no
// link rate is given). A size's time for one iteration is the slowest rank's.

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
      "  --label TEXT       a name for this run, printed in the table's header comment\n";
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
                                               "--servers",   "--label"};
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

// ---------------------------------------------------------------- test values

/// Rank w's element i in iteration r: ((7i + 3w + r) mod 11) - 5, or without the -5 for uint8.
/// Small integers: every dtype holds them and their sums over the workers exactly (fp16 up to
/// 409 workers, bf16 up to 51; int8/uint8 sums wrap, as the reference does), so a result is
/// right only if it is bit for bit the reference. The pattern repeats every 11 elements, so a
/// tile of 11 x 1024 elements is built once and copied (fill and check run at memcpy speed).
class values {
 public:
  static constexpr std::size_t period = 11 * 1024;

  values(bps::dtype t, int workers) : type_(t), size_(bps::dtype_size(t)), workers_(workers) {}

  /// Writes rank `w`'s contribution for iteration `r` into `count` elements at `dst`.
  void fill(void* dst, std::size_t count, int w, int r) {
    copy_tiled(static_cast<std::byte*>(dst), count, tile(false, w, r));
  }

  /// Number of elements at `got` that are not bit for bit the sum over all workers.
  std::size_t count_wrong(const void* got, std::size_t count, int r) {
    const auto& t = tile(true, 0, r);
    const auto* g = static_cast<const std::byte*>(got);
    std::size_t wrong = 0;
    for (std::size_t done = 0; done < count; done += period) {
      const std::size_t n = std::min(period, count - done);
      const std::byte* chunk = g + done * size_;
      if (std::memcmp(chunk, t.data(), n * size_) == 0) continue;
      for (std::size_t i = 0; i < n; ++i)
        if (std::memcmp(chunk + i * size_, t.data() + i * size_, size_) != 0) ++wrong;
    }
    return wrong;
  }

 private:
  static std::int64_t value(bps::dtype t, std::size_t i, int w, int r) {
    auto v = static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(w) * 3 +
                                        static_cast<std::size_t>(r)) % 11);
    return t == bps::dtype::uint8 ? v : v - 5;
  }

  static void store(bps::dtype t, std::byte* p, std::int64_t v) {
    switch (t) {
      case bps::dtype::float32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
      case bps::dtype::float64: { double x = static_cast<double>(v); std::memcpy(p, &x, 8); break; }
      case bps::dtype::float16: { auto x = bps::to_float16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
      case bps::dtype::bfloat16: { auto x = bps::to_bfloat16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
      // Integer sums wrap modulo 2^bits: the conversion from int64 is modular (C++20).
      case bps::dtype::int8: { auto x = static_cast<std::int8_t>(v); std::memcpy(p, &x, 1); break; }
      case bps::dtype::uint8: { auto x = static_cast<std::uint8_t>(v); std::memcpy(p, &x, 1); break; }
      case bps::dtype::int32: { auto x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); break; }
      case bps::dtype::int64: { std::memcpy(p, &v, 8); break; }
    }
  }

  // expected: the sum over all workers; else rank w's values. One cached tile of each kind.
  const std::vector<std::byte>& tile(bool expected, int w, int r) {
    const int rr = r % 11;
    const int ww = expected ? -1 : w;
    auto& cache = cache_[expected ? 1 : 0];
    auto& cache_key = cache_key_[expected ? 1 : 0];
    if (cache_key != std::make_pair(ww, rr) || cache.empty()) {
      cache.assign(period * size_, std::byte{0});
      for (std::size_t i = 0; i < period; ++i) {
        std::int64_t v = 0;
        if (expected) {
          for (int k = 0; k < workers_; ++k) v += value(type_, i, k, rr);
        } else {
          v = value(type_, i, w, rr);
        }
        store(type_, cache.data() + i * size_, v);
      }
      cache_key = {ww, rr};
    }
    return cache;
  }

  void copy_tiled(std::byte* dst, std::size_t count, const std::vector<std::byte>& t) const {
    for (std::size_t done = 0; done < count; done += period)
      std::memcpy(dst + done * size_, t.data(), std::min(period, count - done) * size_);
  }

  bps::dtype type_;
  std::size_t size_;
  int workers_;
  std::pair<int, int> cache_key_[2]{{-2, -2}, {-2, -2}};
  std::vector<std::byte> cache_[2];
};

// ---------------------------------------------------------------- the sweep

/// What a benchmark plugs into `run_sweep`: its collective, spoken in bytes.
struct backend {
  std::string name;   // "byteps", "gloo", "mpi"
  int rank = 0;
  int size = 1;
  int servers = 0;    // k for the bound (0: none)
  /// Sets up whatever a (dtype, byte size) needs (e.g. a named tensor); optional.
  std::function<void(bps::dtype, std::size_t bytes)> prepare;
  /// The operation being measured: sums `count` elements of `type` at `data` over all ranks.
  std::function<void(void* data, std::size_t count, bps::dtype type)> all_reduce;
  /// Blocks until every rank called it.
  std::function<void()> barrier;
  /// Sums `v` over all ranks, in place (for the statistics; not timed).
  std::function<void(std::vector<double>& v)> sum_doubles;
  /// Whether the backend can sum this dtype (peers lack some).
  std::function<bool(bps::dtype)> supports = [](bps::dtype) { return true; };
};

struct row {
  std::size_t bytes = 0;
  std::size_t count = 0;
  bps::dtype type = bps::dtype::float32;
  double p50_s = 0, p99_s = 0;
  double algbw = 0, busbw = 0;  // bytes/s
  double wrong = 0;
  double bound_ratio = 0;       // 0: no bound
};

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least p of the samples at or below it.
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
  rank = std::clamp<std::size_t>(rank, 1, v.size());
  return v[rank - 1];
}

inline void print_header(std::FILE* out, const options& o, const backend& b) {
  std::fprintf(out, "# %s%s%s: %d ranks", b.name.c_str(), o.label.empty() ? "" : " ",
               o.label.c_str(), b.size);
  if (b.servers > 0) std::fprintf(out, ", %d servers", b.servers);
  std::fprintf(out, ", topology %s", std::string(topology_name(o.topo)).c_str());
  if (o.link_gbps > 0) std::fprintf(out, ", link %.3g Gbit/s", o.link_gbps);
  std::fprintf(out, ", %d iters + %d warmup, check %s\n", o.iters, o.warmup, o.check ? "on" : "off");
  std::fprintf(out, "# time: slowest rank per iteration; algbw = size/p50; busbw = algbw*2(n-1)/n; "
                    "GB = 1e9 bytes\n");
  std::fprintf(out, "#%11s %11s %9s %10s %10s %10s %10s %7s", "size", "count", "dtype", "p50_us",
               "p99_us", "algbw_GBps", "busbw_GBps", "wrong");
  if (o.link_gbps > 0 && o.topo != topology::none) std::fprintf(out, " %10s", "time/bound");
  std::fprintf(out, "\n");
  std::fflush(out);
}

inline void print_row(std::FILE* out, const options& o, const row& r) {
  std::fprintf(out, "%12zu %11zu %9s %10.1f %10.1f %10.4f %10.4f %7.0f", r.bytes, r.count,
               std::string(bps::dtype_name(r.type)).c_str(), r.p50_s * 1e6, r.p99_s * 1e6,
               r.algbw / 1e9, r.busbw / 1e9, r.wrong);
  if (o.link_gbps > 0 && o.topo != topology::none) {
    if (r.bound_ratio > 0) std::fprintf(out, " %10.3f", r.bound_ratio);
    else std::fprintf(out, " %10s", "-");
  }
  std::fprintf(out, "\n");
  std::fflush(out);
}

/// Byte-aligned scratch for the largest size (64-byte aligned, never shared between ranks).
struct aligned_buffer {
  explicit aligned_buffer(std::size_t bytes)
      : p(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64))) {
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, (bytes + 63) / 64 * 64);  // touch every page before timing
  }
  ~aligned_buffer() { std::free(p); }
  aligned_buffer(const aligned_buffer&) = delete;
  aligned_buffer& operator=(const aligned_buffer&) = delete;
  std::byte* p;
};

/// Runs the sweep; rank 0 prints the table on stdout and progress on stderr. Returns the total
/// number of wrong elements seen by any rank (0 when --check 0).
inline double run_sweep(const options& o, backend& b) {
  using clock = std::chrono::steady_clock;
  const auto sizes = sweep(o);
  const bool root = b.rank == 0;
  const int n = b.size;
  const double link_Bps = o.link_gbps * 1e9 / 8;
  const int k = o.servers > 0 ? o.servers : b.servers;
  aligned_buffer buffer(sizes.back());
  if (root) print_header(stdout, o, b);
  double total_wrong = 0;

  for (bps::dtype type : o.dtypes) {
    if (!b.supports(type)) {
      if (root)
        std::fprintf(stdout, "# %s: dtype %s is not supported; skipped\n", b.name.c_str(),
                     std::string(bps::dtype_name(type)).c_str());
      continue;
    }
    const std::size_t esize = bps::dtype_size(type);
    values vals(type, n);
    for (std::size_t bytes : sizes) {
      const std::size_t count = bytes / esize;
      const std::size_t real_bytes = count * esize;
      if (b.prepare) b.prepare(type, real_bytes);
      std::vector<double> times;
      times.reserve(static_cast<std::size_t>(o.iters));
      double wrong = 0;
      for (int it = 0; it < o.warmup + o.iters; ++it) {
        vals.fill(buffer.p, count, b.rank, it);
        b.barrier();
        const auto t0 = clock::now();
        b.all_reduce(buffer.p, count, type);
        const auto t1 = clock::now();
        if (it >= o.warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
        if (o.check) wrong += static_cast<double>(vals.count_wrong(buffer.p, count, it));
      }
      // Every rank's times and wrong count, summed into one vector: slot rank*iters + j.
      const auto iters = static_cast<std::size_t>(o.iters);
      std::vector<double> stats(static_cast<std::size_t>(n) * (iters + 1), 0.0);
      for (std::size_t j = 0; j < iters; ++j) stats[static_cast<std::size_t>(b.rank) * iters + j] = times[j];
      stats[static_cast<std::size_t>(n) * iters + static_cast<std::size_t>(b.rank)] = wrong;
      b.sum_doubles(stats);
      double size_wrong = 0;
      for (int r = 0; r < n; ++r) size_wrong += stats[static_cast<std::size_t>(n) * iters + static_cast<std::size_t>(r)];
      total_wrong += size_wrong;
      if (!root) continue;
      std::vector<double> slowest(iters, 0.0);
      for (int r = 0; r < n; ++r)
        for (std::size_t j = 0; j < iters; ++j)
          slowest[j] = std::max(slowest[j], stats[static_cast<std::size_t>(r) * iters + j]);
      row out;
      out.bytes = real_bytes;
      out.count = count;
      out.type = type;
      out.p50_s = percentile(slowest, 0.50);
      out.p99_s = percentile(slowest, 0.99);
      out.algbw = out.p50_s > 0 ? static_cast<double>(real_bytes) / out.p50_s : 0;
      out.busbw = n > 1 ? out.algbw * 2.0 * (n - 1) / n : out.algbw;
      out.wrong = size_wrong;
      const double bound = bound_seconds(o.topo, n, k, static_cast<double>(real_bytes), link_Bps);
      out.bound_ratio = bound > 0 ? out.p50_s / bound : 0;
      print_row(stdout, o, out);
      std::fprintf(stderr, "%s: %s %s done (p50 %.1f us)\n", b.name.c_str(),
                   format_bytes(real_bytes).c_str(), std::string(bps::dtype_name(type)).c_str(),
                   out.p50_s * 1e6);
    }
  }
  return total_wrong;
}

}  // namespace bench
