// bps-bench: a push_pull sweep over sizes and dtypes, run as every worker of a byteps job
// (byteps-launch on loopback, or benchmarks/run-emulated.sh on an emulated cluster). Rank 0
// prints an nccl-tests style table on stdout (see common.hpp); progress goes to stderr. With
// --model, a real network's gradients per iteration instead of the sweep (model_run.hpp).
// Every result is compared with the exact reference sum; the exit status is 1 if any was wrong.
#include <byteps/bodies.hpp>  // the TLS communicators are not in byteps::compiled
#include <byteps/compress/registry.hpp>
#if BYTEPS_BENCH_TLS
#include <byteps/transport/tls/tls.hpp>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "common.hpp"
#include "model_run.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(
      out,
      "bps-bench: push_pull sweep over sizes, nccl-tests style columns.\n\n"
      "Run it as every worker of a byteps job; the job's shape comes from the usual\n"
      "variables (DMLC_ROLE=worker, DMLC_NUM_WORKER, DMLC_NUM_SERVER, DMLC_PS_ROOT_URI,\n"
      "DMLC_PS_ROOT_PORT, BYTEPS_PARTITION_BYTES, ...; see docs/env.md). For example:\n\n"
      "  build/tools/byteps-launch --workers 2 --servers 2 -- \\\n"
      "      build/benchmarks/bps-bench --max-bytes 64M\n\n"
      "Options:\n%s%s"
      "                     Each iteration push_pulls every tensor, the last layer's\n"
      "                     first, with priority -(forward position) (the first layers go\n"
      "                     first), and waits for all of them only after starting all.\n"
      "  --compressor R     after the sweep, the same sweep (float32 only, no check: the\n"
      "                     compression is lossy) with every tensor compressed by recipe\n"
      "                     R (BYTEPS_COMPRESSOR's syntax, e.g. ef_onebit:scaling=1), then\n"
      "                     per size: bytes pushed per push_pull / raw bytes, and the\n"
      "                     uncompressed p50 over the compressed p50 (speed-up). Sizes under\n"
      "                     BYTEPS_MIN_COMPRESS_BYTES (65536) stay raw.\n"
      "  --idle S           after the sweep, keep the job up and idle for S seconds\n"
      "                     (for scripts/bench-idle-cpu.sh: idle nodes should use no CPU)\n"
      "  --help             print this help\n\n"
      "Transport: ipc over TCP (BYTEPS_ENABLE_IPC=0: plain TCP), or over TLS when\n"
      "BYTEPS_TLS_CERT is set (with BYTEPS_TLS_CA and BYTEPS_TLS_KEY), as byteps-server\n"
      "chooses; every node of the job must agree. With BYTEPS_LOCAL_SIZE > 1\n"
      "(byteps-launch --local-size N) the N worker processes of a machine meet in\n"
      "bps::local::host and push their owned slices.\n\n"
      "Columns: size (bytes), count (elements), dtype, p50 and p99 time of one push_pull\n"
      "(slowest worker, microseconds), algbw = size/p50 and busbw = algbw*2(n-1)/n in\n"
      "GB/s (1e9 bytes), wrong (elements that differ from the exact sum, summed over\n"
      "workers and iterations; must be 0), time/bound (p50 over the performance model's\n"
      "bound for --topology: ps = max(M/B, n*M/(k*B)), colocated = 2(n-1)/n*M/B).\n"
      "With --model: one row, p50 and p99 of one backward pass's communication (slowest\n"
      "worker, milliseconds) and wrong, under a comment naming the model's tensor count,\n"
      "parameter count and bytes, e.g.\n"
      "  build/tools/byteps-launch --workers 2 --servers 2 -- \\\n"
      "      build/benchmarks/bps-bench --model resnet50 --iters 10 --warmup 3\n",
      bench::common_help(), bench::model_help());
}

// ipc over `Net`: pushes to a server on the same host go through shared memory
// (BYTEPS_ENABLE_IPC=0 measures `Net` alone); across hosts it is `Net`: TCP, or TLS when
// BYTEPS_TLS_CERT is set.
// With BYTEPS_LOCAL_SIZE > 1 the local ranks of a machine meet in `Local` = local::host.
template <class Net, class Local = bps::local::none>
using comm_over = bps::Communicator<bps::transport::ipc<Net>, Local, bps::partition::by_bytes,
                                    bps::schedule::priority>;


template <class Comm>
std::uint64_t pushed_bytes(Comm& comm) {
  const auto s = comm.stats();
  return std::accumulate(s.bytes_per_server.begin(), s.bytes_per_server.end(), std::uint64_t{0});
}

// The sweep again with every tensor compressed by `recipe`, then rank 0's table: per size, the
// bytes this worker pushed per push_pull (its encodings, with their 8-byte raw sizes) over the
// raw bytes, and the uncompressed p50 (from `plain`, the sweep just run) over the compressed one.
template <class Comm>
void compressed_sweep(Comm& comm, const bps::Config& cfg, bench::options opts, bench::backend b,
                      const std::string& recipe, const std::vector<bench::row>& plain) {
  const auto spec = bps::compress::by_name(bps::compress::parse(recipe, "--compressor"));
  opts.check = false;  // lossy: the exact sum is not the answer
  opts.label = "compressed " + spec->name();
  std::string tensor;
  std::map<std::size_t, std::uint64_t> wire;  // raw bytes -> bytes pushed over the size's calls
  std::size_t current = 0;
  std::uint64_t mark = 0;
  auto close_size = [&] {
    const auto now = pushed_bytes(comm);
    if (current != 0) wire[current] = now - mark;
    mark = now;
  };
  b.supports = [](bps::dtype t) { return t == bps::dtype::float32; };
  b.prepare = [&](bps::dtype t, std::size_t bytes) {
    close_size();
    current = bytes;
    tensor = fmt::format("bench.{}.{}.{}", recipe, bps::dtype_name(t), bytes);
  };
  b.all_reduce = [&](void* data, std::size_t count, bps::dtype t) {
    comm.push_pull(tensor, data, count, t, {.compressor = spec}).wait();
  };
  std::vector<bench::row> packed;
  bench::run_sweep(opts, b, &packed);
  close_size();
  if (b.rank != 0) return;
  std::printf(
      "# %s vs uncompressed, rank 0: wire = bytes pushed per push_pull (min compress "
      "bytes %zu); ratio = raw / wire; speed-up = uncompressed p50 / compressed p50\n",
      spec->name().c_str(), cfg.min_compress_bytes);
  std::printf("#%11s %12s %8s %12s %12s %9s\n", "size", "wire_bytes", "ratio", "plain_p50_us",
              "comp_p50_us", "speed-up");
  const double calls = opts.warmup + opts.iters;
  for (const auto& r : packed) {
    const auto base = std::find_if(plain.begin(), plain.end(), [&](const bench::row& p) {
      return p.bytes == r.bytes && p.type == r.type;
    });
    const double per_call = static_cast<double>(wire[r.bytes]) / calls;
    std::printf("%12zu %12.0f %8.2f %12.1f %12.1f %9.2f\n", r.bytes, per_call,
                per_call > 0 ? static_cast<double>(r.bytes) / per_call : 0,
                base != plain.end() ? base->p50_s * 1e6 : 0, r.p50_s * 1e6,
                base != plain.end() && r.p50_s > 0 ? base->p50_s / r.p50_s : 0);
  }
  std::fflush(stdout);
}

// --model: every gradient of a backward pass, pushed from the last layer to the first as a
// framework's hooks would as each becomes ready, with the first layers' priority highest so
// that they come back first for the next forward pass; nothing is waited for until all are
// started. Returns the wrong elements over all workers.
template <class Comm>
double model_mix_job(Comm& comm, const bench::options& opts, bench::backend& b,
                     const bench::model::mix& model) {
  const bench::mix_memory memory(model);
  if (b.rank == 0) bench::print_mix_header(stdout, opts, b, model);
  std::vector<bps::handle> pending;
  pending.reserve(model.tensors.size());
  const auto backward = [&](std::span<const bench::mix_tensor> tensors) {
    pending.clear();
    for (auto t = tensors.rbegin(); t != tensors.rend(); ++t)
      pending.push_back(comm.push_pull(t->name, t->data, t->count, bps::dtype::float32,
                                       {.priority = t->priority}));
    for (auto& h : pending) h.wait();
  };
  const auto result = bench::run_mix(opts, b, memory, backward);
  if (b.rank == 0) {
    bench::print_mix_row(stdout, "byteps", result);
    std::fprintf(stderr, "bps-bench: %s done (p50 %.2f ms)\n", model.name.c_str(),
                 result.p50_s * 1e3);
  }
  return result.wrong;
}

// The sweep or the model's mix (and what --compressor and --idle ask for) as one worker of the
// job.
template <class Comm>
int bench_job(const bps::Config& cfg, const bench::options& opts, int idle_s,
              const std::string& compressor, const std::optional<bench::model::mix>& model) {
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
    comm.push_pull(fmt::format("bench.stats.{}", v.size()), std::span<double>(v),
                   {.compressor = bps::compress::none()})  // exact, whatever BYTEPS_COMPRESSOR
        .wait();
  };
  if (b.rank == 0)
    std::fprintf(
        stderr, "bps-bench: %d workers, %d servers, partition %s, credit %d, %s\n", b.size,
        cfg.num_servers,
        cfg.partition_bytes == 0 ? "auto" : fmt::format("{} bytes", cfg.partition_bytes).c_str(),
        cfg.scheduling_credit, cfg.scheduling_by_priority ? "by priority" : "in call order");
  std::vector<bench::row> plain;
  const double wrong =
      model ? model_mix_job(comm, opts, b, *model) : bench::run_sweep(opts, b, &plain);
  comm.barrier();
  if (!compressor.empty()) compressed_sweep(comm, cfg, opts, b, compressor, plain);
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
}

// The job on `Net`, with local::host when this machine runs several worker processes.
template <class Net, class... Args>
int bench_job_over(const bps::Config& cfg, Args&&... args) {
  if (cfg.local_size > 1)
    return bench_job<comm_over<Net, bps::local::host>>(cfg, std::forward<Args>(args)...);
  return bench_job<comm_over<Net>>(cfg, std::forward<Args>(args)...);
}

}  // namespace

int main(int argc, char** argv) {
  bench::options opts;
  int idle_s = 0;
  std::string compressor;
  std::optional<bench::model::mix> model;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a == "--help" || a == "-h") {
        usage(stdout);
        return 0;
      }
      if (a == "--compressor" && i + 1 < argc) {
        compressor = argv[++i];
        continue;
      }
      if (a == "--model") {
        if (i + 1 >= argc) throw bench::usage_error("--model needs a value (see --help)");
        model = bench::parse_model(argv[++i]);
        continue;
      }
      if (a == "--idle" && i + 1 < argc) {
        char* end = nullptr;
        idle_s = static_cast<int>(std::strtol(argv[++i], &end, 10));
        if (*end != '\0' || idle_s < 0)
          throw bench::usage_error("--idle: expected whole seconds >= 0");
        continue;
      }
      if (!bench::parse_common(opts, argc, argv, i))
        throw bench::usage_error("unknown flag '" + std::string(a) + "' (see --help)");
    }
    bench::validate(opts);
    if (model) {
      bench::validate_for_model(opts);
      if (!compressor.empty())
        throw bench::usage_error(
            "--compressor applies to the sweep; it cannot be combined "
            "with --model");
    }
  } catch (const bench::usage_error& e) {
    std::fprintf(stderr, "bps-bench: %s\n", e.what());
    return 2;
  }

  try {
    const bps::Config cfg = bps::Config::from_env();
    if (cfg.node_role != bps::role::worker) {
      std::fprintf(stderr,
                   "bps-bench: DMLC_ROLE must be worker (run servers with byteps-server)\n");
      return 2;
    }
    if (cfg.tls_cert.empty())
      return bench_job_over<bps::transport::tcp>(cfg, opts, idle_s, compressor, model);
#if BYTEPS_BENCH_TLS
    return bench_job_over<bps::transport::tls<bps::transport::tcp>>(cfg, opts, idle_s,
                                                                     compressor, model);
#else
    throw bps::usage_error("BYTEPS_TLS_CERT is set, but this bps-bench was built without TLS");
#endif
  } catch (const bps::usage_error& e) {
    std::fprintf(stderr, "bps-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bps-bench: %s\n", e.what());
    return 1;
  }
}
