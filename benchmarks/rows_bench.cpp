// bps-rows-bench: embedding-table steps through byteps (issue 38's benchmark). Run it as every
// worker of a job (byteps-launch, benchmarks/rows-emulated.sh). For each Zipf skew, a step of
// each worker pulls its batch's rows of one table and pushes their gradients (the servers apply
// SGD); then, as the dense baseline, a step push_pulls the gradient of the whole table. Rank 0
// prints, per system and skew: the unique rows a worker moves a step, the bytes a worker sends
// and receives a step (payloads and 64-byte frame headers), the median step time, and the rows
// the job processes a second (every worker's batch). Comparing with Gloo's all-gather of the
// same pairs: gloo-rows-allgather, same flags, same draws.
//
//   byteps-launch --workers 4 --servers 4 -- bps-rows-bench [--zipf 0.9,1.05,1.2] ...

#include <byteps/byteps.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "rows_workload.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: bps-rows-bench [options]  (as every worker of a byteps job)\n%s"
               "  --dense-steps N   timed steps of the dense baseline (default 5; 0: none)\n",
               rows_bench::workload_help());
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) try {
  rows_bench::workload w;
  int dense_steps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    }
    if (rows_bench::parse_flag(w, argc, argv, i)) continue;
    if (a == "--dense-steps" && i + 1 < argc) {
      dense_steps = std::stoi(argv[++i]);
      continue;
    }
    usage(stderr);
    return 2;
  }
  const auto cfg = bps::Config::from_env();
  bps::Communicator<> comm(cfg);
  const int rank = comm.rank(), size = comm.size(), servers = cfg.num_servers;
  const std::size_t row_bytes = w.dim * sizeof(float);
  comm.declare_table({.name = "bench_rows", .rows = w.rows, .dim = w.dim, .optimizer = "sgd:lr=0.001"});
  if (rank == 0) {
    std::printf("# bps-rows-bench: %d workers, %d servers, a table of %llu rows x %u float32 "
                "(%.1f MB), batch %d ids a worker a step\n",
                size, servers, static_cast<unsigned long long>(w.rows), w.dim,
                static_cast<double>(w.rows * row_bytes) / 1e6, w.batch);
    std::printf("%-14s %5s %12s %16s %9s %12s\n", "system", "zipf", "unique/step", "MB/step/worker",
                "p50 ms", "rows/s");
  }
  int index = 0;
  for (double skew : w.skews) {
    const rows_bench::zipf z(w.rows, skew);
    std::vector<double> times, pulls, pushes, unique;
    for (int s = 0; s < w.warmup + w.steps; ++s) {
      const auto step = rows_bench::draw_step(w, z, rank, index++);
      std::vector<float> rows(step.ids.size() * w.dim);
      comm.barrier();
      const auto began = clock_type::now();
      comm.pull_rows("bench_rows", step.ids, std::span(rows)).wait();
      const double pulled = seconds_since(began);
      comm.push_rows("bench_rows", step.ids, std::span(step.grads)).wait();
      const double took = seconds_since(began);
      if (s < w.warmup) continue;
      times.push_back(took);
      pulls.push_back(pulled);
      pushes.push_back(took - pulled);
      unique.push_back(static_cast<double>(rows_bench::unique(step, w.dim).ids.size()));
    }
    const double u = rows_bench::median(unique), p50 = rows_bench::median(times);
    // Each: the ids out, the rows back (a pull) or out (a push); a request and an answer frame
    // per server.
    const double one_way = u * (8 + row_bytes) + 2.0 * servers * (64 + 16);
    if (rank == 0) {
      std::printf("%-14s %5.2f %12.0f %16.3f %9.3f %12.0f\n", "byteps-rows", skew, u,
                  2 * one_way / 1e6, p50 * 1e3, static_cast<double>(w.batch) * size / p50);
      std::printf("%-14s %5.2f %12.0f %16.3f %9.3f %12.0f\n", "  pull_rows", skew, u,
                  one_way / 1e6, rows_bench::median(pulls) * 1e3,
                  static_cast<double>(w.batch) * size / rows_bench::median(pulls));
      std::printf("%-14s %5.2f %12.0f %16.3f %9.3f %12.0f\n", "  push_rows", skew, u,
                  one_way / 1e6, rows_bench::median(pushes) * 1e3,
                  static_cast<double>(w.batch) * size / rows_bench::median(pushes));
    }
    std::fflush(stdout);
  }
  if (dense_steps > 0) {
    std::vector<float> grad(w.rows * w.dim, 0.001f);
    std::vector<double> times;
    for (int s = 0; s < 1 + dense_steps; ++s) {
      comm.barrier();
      const auto began = clock_type::now();
      comm.push_pull("bench_dense", std::span(grad)).wait();
      if (s > 0) times.push_back(seconds_since(began));
    }
    const double p50 = rows_bench::median(times);
    const double bytes = 2.0 * static_cast<double>(grad.size() * sizeof(float));
    if (rank == 0)
      std::printf("%-14s %5s %12llu %16.3f %9.3f %12.0f\n", "byteps-dense", "-",
                  static_cast<unsigned long long>(w.rows), bytes / 1e6, p50 * 1e3,
                  static_cast<double>(w.batch) * size / p50);
  }
  comm.barrier();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bps-rows-bench: %s\n", e.what());
  return 1;
}
