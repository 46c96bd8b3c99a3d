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
#include <cerrno>
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
#include "bench_options.hpp"
#include "bench_values.hpp"

namespace bench {

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
  /// Optional, untimed: moves the filled host values to where `all_reduce` works, and the
  /// result back for the check (a device buffer, for bps-gpu-bench). `data` is the host buffer.
  std::function<void(void* data, std::size_t bytes)> upload, download;
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

/// Every rank's iteration times and wrong count, combined (every rank calls it, with as many
/// times as the others): per iteration the slowest rank's time, and the wrong elements of all.
struct combined_times {
  std::vector<double> slowest;
  double wrong = 0;
};

inline combined_times combine_ranks(backend& b, const std::vector<double>& times, double wrong) {
  const int n = b.size;
  const std::size_t iters = times.size();
  // Every rank's times and wrong count, summed into one vector: slot rank*iters + j.
  std::vector<double> stats(static_cast<std::size_t>(n) * (iters + 1), 0.0);
  for (std::size_t j = 0; j < iters; ++j)
    stats[static_cast<std::size_t>(b.rank) * iters + j] = times[j];
  stats[static_cast<std::size_t>(n) * iters + static_cast<std::size_t>(b.rank)] = wrong;
  b.sum_doubles(stats);
  combined_times out;
  out.slowest.assign(iters, 0.0);
  for (int r = 0; r < n; ++r) {
    out.wrong += stats[static_cast<std::size_t>(n) * iters + static_cast<std::size_t>(r)];
    for (std::size_t j = 0; j < iters; ++j)
      out.slowest[j] = std::max(out.slowest[j], stats[static_cast<std::size_t>(r) * iters + j]);
  }
  return out;
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

/// --times: this rank's iterations, one line each ("bytes iteration left_barrier_ns end_ns";
/// warm-up iterations negative), for barrier skew and round spans (round-spans.sh).
class times_file {
 public:
  times_file(const std::string& dir, const backend& b) {
    if (dir.empty()) return;
    const std::string path = dir + "/" + b.name + "-rank" + std::to_string(b.rank) + ".txt";
    f_ = std::fopen(path.c_str(), "w");
    if (!f_) throw usage_error("--times: cannot write " + path + ": " + std::strerror(errno));
  }
  ~times_file() {
    if (f_) std::fclose(f_);
  }
  times_file(const times_file&) = delete;
  times_file& operator=(const times_file&) = delete;
  void add(std::size_t bytes, int iteration, std::chrono::steady_clock::time_point t0,
           std::chrono::steady_clock::time_point t1) {
    if (!f_) return;
    const auto ns = [](auto t) {
      return static_cast<long long>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
    };
    std::fprintf(f_, "%zu %d %lld %lld\n", bytes, iteration, ns(t0), ns(t1));
  }

 private:
  std::FILE* f_ = nullptr;
};

/// Runs the sweep; rank 0 prints the table on stdout and progress on stderr, and appends each
/// row to `rows` when given. Returns the total number of wrong elements seen by any rank (0
/// when --check 0).
inline double run_sweep(const options& o, backend& b, std::vector<row>* rows = nullptr) {
  using clock = std::chrono::steady_clock;
  const auto sizes = sweep(o);
  const bool root = b.rank == 0;
  const int n = b.size;
  const double link_Bps = o.link_gbps * 1e9 / 8;
  const int k = o.servers > 0 ? o.servers : b.servers;
  aligned_buffer buffer(sizes.back());
  times_file times(o.times_dir, b);
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
      std::vector<double> timed;
      timed.reserve(static_cast<std::size_t>(o.iters));
      double wrong = 0;
      for (int it = 0; it < o.warmup + o.iters; ++it) {
        vals.fill(buffer.p, count, b.rank, it);
        if (b.upload) b.upload(buffer.p, real_bytes);
        b.barrier();
        const auto t0 = clock::now();
        b.all_reduce(buffer.p, count, type);
        const auto t1 = clock::now();
        // The copy back and the check wait until every rank's time is taken: run at once they
        // would take a core from the ranks still being timed (on one machine).
        if (o.check || b.download) b.barrier();
        if (b.download) b.download(buffer.p, real_bytes);
        if (it >= o.warmup) timed.push_back(std::chrono::duration<double>(t1 - t0).count());
        times.add(real_bytes, it - o.warmup, t0, t1);
        if (o.check) wrong += static_cast<double>(vals.count_wrong(buffer.p, count, it));
      }
      const auto [slowest, size_wrong] = combine_ranks(b, timed, wrong);
      total_wrong += size_wrong;
      if (!root) continue;
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
      if (rows != nullptr) rows->push_back(out);
      std::fprintf(stderr, "%s: %s %s done (p50 %.1f us)\n", b.name.c_str(),
                   format_bytes(real_bytes).c_str(), std::string(bps::dtype_name(type)).c_str(),
                   out.p50_s * 1e6);
    }
  }
  return total_wrong;
}

}  // namespace bench
