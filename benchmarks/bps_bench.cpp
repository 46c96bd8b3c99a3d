// bps-bench: a push_pull sweep over sizes and dtypes, run as every worker of a byteps job
// (byteps-launch on loopback, or benchmarks/run-emulated.sh on an emulated cluster). Rank 0
// prints an nccl-tests style table on stdout (see common.hpp); progress goes to stderr.
// Every result is compared with the exact reference sum; the exit status is 1 if any was wrong.
#include <byteps/byteps.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "common.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "bps-bench: push_pull sweep over sizes, nccl-tests style columns.\n\n"
               "Run it as every worker of a byteps job; the job's shape comes from the usual\n"
               "variables (DMLC_ROLE=worker, DMLC_NUM_WORKER, DMLC_NUM_SERVER, DMLC_PS_ROOT_URI,\n"
               "DMLC_PS_ROOT_PORT, BYTEPS_PARTITION_BYTES, ...; see docs/env.md). For example:\n\n"
               "  build/tools/byteps-launch --workers 2 --servers 2 -- \\\n"
               "      build/benchmarks/bps-bench --max-bytes 64M\n\n"
               "Options:\n%s"
               "  --idle S           after the sweep, keep the job up and idle for S seconds\n"
               "                     (for scripts/bench-idle-cpu.sh: idle nodes should use no CPU)\n"
               "  --help             print this help\n\n"
               "Columns: size (bytes), count (elements), dtype, p50 and p99 time of one push_pull\n"
               "(slowest worker, microseconds), algbw = size/p50 and busbw = algbw*2(n-1)/n in\n"
               "GB/s (1e9 bytes), wrong (elements that differ from the exact sum, summed over\n"
               "workers and iterations; must be 0), time/bound (p50 over the performance model's\n"
               "bound for --topology: ps = max(M/B, n*M/(k*B)), colocated = 2(n-1)/n*M/B).\n",
               bench::common_help());
}

// ipc over TCP: pushes to a server on the same host go through shared memory
// (BYTEPS_ENABLE_IPC=0 measures plain TCP); across hosts it is TCP.
using Comm = bps::Communicator<bps::transport::ipc<bps::transport::tcp>, bps::local::none,
                               bps::partition::by_bytes, bps::schedule::priority>;

}  // namespace

int main(int argc, char** argv) {
  bench::options opts;
  int idle_s = 0;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a == "--help" || a == "-h") {
        usage(stdout);
        return 0;
      }
      if (a == "--idle" && i + 1 < argc) {
        char* end = nullptr;
        idle_s = static_cast<int>(std::strtol(argv[++i], &end, 10));
        if (*end != '\0' || idle_s < 0) throw bench::usage_error("--idle: expected whole seconds >= 0");
        continue;
      }
      if (!bench::parse_common(opts, argc, argv, i))
        throw bench::usage_error("unknown flag '" + std::string(a) + "' (see --help)");
    }
    bench::validate(opts);
  } catch (const bench::usage_error& e) {
    std::fprintf(stderr, "bps-bench: %s\n", e.what());
    return 2;
  }

  try {
    const bps::Config cfg = bps::Config::from_env();
    if (cfg.node_role != bps::role::worker) {
      std::fprintf(stderr, "bps-bench: DMLC_ROLE must be worker (run servers with byteps-server)\n");
      return 2;
    }
    Comm comm(cfg);
    bench::backend b;
    b.name = "byteps";
    b.rank = comm.rank();
    b.size = comm.size();
    b.servers = cfg.num_servers;
    std::string tensor;
    b.prepare = [&](bps::dtype t, std::size_t bytes) {
      tensor = fmt::format("bench.{}.{}", bps::dtype_name(t), bytes);
    };
    b.all_reduce = [&](void* data, std::size_t count, bps::dtype t) {
      comm.push_pull(tensor, data, count, t).wait();
    };
    b.barrier = [&] { comm.barrier(); };
    b.sum_doubles = [&](std::vector<double>& v) {
      comm.push_pull(fmt::format("bench.stats.{}", v.size()), std::span<double>(v)).wait();
    };
    if (b.rank == 0)
      std::fprintf(
          stderr, "bps-bench: %d workers, %d servers, partition %s, credit %d\n", b.size,
          cfg.num_servers,
          cfg.partition_bytes == 0 ? "auto" : fmt::format("{} bytes", cfg.partition_bytes).c_str(),
          cfg.scheduling_credit);
    const double wrong = bench::run_sweep(opts, b);
    comm.barrier();
    if (idle_s > 0) {
      if (b.rank == 0) std::fprintf(stderr, "bps-bench: idle for %d s\n", idle_s);
      std::this_thread::sleep_for(std::chrono::seconds(idle_s));
      comm.barrier();
      if (b.rank == 0) std::fprintf(stderr, "bps-bench: idle done\n");
    }
    if (wrong != 0) {
      if (b.rank == 0) std::fprintf(stderr, "bps-bench: %.0f wrong elements\n", wrong);
      return 1;
    }
    return 0;
  } catch (const bps::usage_error& e) {
    std::fprintf(stderr, "bps-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bps-bench: %s\n", e.what());
    return 1;
  }
}
