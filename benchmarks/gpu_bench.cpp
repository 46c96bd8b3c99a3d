// bps-gpu-bench: the GPU path's two measurements (issue 14).
//
//   bps-gpu-bench --copy [--min-bytes 4K --max-bytes 256M --iters 20 --warmup 5]
//       pinned host <-> device copies on one stream, timed with CUDA events: the bound for the
//       NCCL local stage's copy to host (reduce_scatter) and copy back (all_gather).
//   byteps-launch --workers 2 --servers 2 -- bps-gpu-bench [sweep flags]
//       as every worker of a job: the push_pull sweep of bps-bench (same columns, same exact
//       check) on device buffers through bps::local::nccl. The values are filled on the host and
//       copied to the device before each timed push_pull, and back after it, outside the time.
//
// benchmarks/gpu-sweep.sh runs both and, per size, a traced job whose `byteps-trace summary`
// splits the time into the pipeline's stages. Exits 77 with a message where there is no GPU.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <atomic>
#include <byteps/bodies.hpp>
#include <byteps/local/nccl.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"

namespace {

using Comm = bps::Communicator<bps::transport::tcp, bps::local::nccl, bps::partition::by_bytes,
                               bps::schedule::priority>;

constexpr int skip_code = 77;

void usage(std::FILE* out) {
  std::fprintf(out,
               "bps-gpu-bench: the GPU path's copy bandwidth and device push_pull sweep.\n\n"
               "  bps-gpu-bench --copy [flags]\n"
               "      pinned host <-> device copy bandwidth per size (CUDA events), no job\n"
               "  byteps-launch --workers 2 --servers 2 -- bps-gpu-bench [flags]\n"
               "      as every worker: push_pull of device buffers through bps::local::nccl,\n"
               "      bps-bench's columns and exact check (see bps-bench --help)\n\n"
               "Options:\n%s"
               "  --copy             the copy measurement instead of the sweep\n"
               "  --help             print this help\n\n"
               "Exits 77 (and says so) where there is no CUDA device.\n",
               bench::common_help());
}

// CUDA's errors as the library words them (local/cuda_helpers.hpp).
void cuda(cudaError_t e, const char* call) {
  bps::local::nccl_detail::cuda_check(e, call, "the benchmark");
}

struct device_memory {
  explicit device_memory(std::size_t bytes) {
    cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  }
  ~device_memory() { cudaFree(p); }
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
  void* p = nullptr;
};

// Median copy time of `bytes` in direction `kind`, on one stream, from CUDA events.
double copy_seconds(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                    cudaStream_t stream, const bench::options& o) {
  cudaEvent_t start = nullptr, stop = nullptr;
  cuda(cudaEventCreate(&start), "cudaEventCreate");
  cuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    cuda(cudaEventRecord(start, stream), "cudaEventRecord");
    cuda(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
    cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (it >= o.warmup) times.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return bench::percentile(times, 0.5);
}

// What the host sees: from queueing a 4 KiB copy (and an event after it) to cudaEventQuery
// reporting it done, polled in a loop; and from queueing it with a host function after it to
// that function running. The NCCL local stage pays the first per step (its poll), the second
// when it sleeps.
void host_latency(void* dst, const void* src, cudaMemcpyKind kind, cudaStream_t stream,
                  const char* label) {
  using clock = std::chrono::steady_clock;
  cudaEvent_t done = nullptr;
  cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  std::vector<double> polled, called;
  std::atomic<int> flag{0};
  for (int it = 0; it < 220; ++it) {
    const auto t0 = clock::now();
    cuda(cudaMemcpyAsync(dst, src, 4096, kind, stream), "cudaMemcpyAsync");
    cuda(cudaEventRecord(done, stream), "cudaEventRecord");
    cudaError_t e;
    while ((e = cudaEventQuery(done)) == cudaErrorNotReady) {
    }
    cuda(e, "cudaEventQuery");
    const auto t1 = clock::now();
    flag.store(0);
    const auto t2 = clock::now();
    cuda(cudaMemcpyAsync(dst, src, 4096, kind, stream), "cudaMemcpyAsync");
    cuda(cudaLaunchHostFunc(
             stream, [](void* f) { static_cast<std::atomic<int>*>(f)->store(1); }, &flag),
         "cudaLaunchHostFunc");
    while (flag.load() == 0) {
    }
    const auto t3 = clock::now();
    if (it >= 20) {
      polled.push_back(std::chrono::duration<double>(t1 - t0).count());
      called.push_back(std::chrono::duration<double>(t3 - t2).count());
    }
  }
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaEventDestroy(done);
  std::printf(
      "# %s 4 KiB, host-observed, p50/p99 of 200: event polled %.1f/%.1f us, host "
      "function ran %.1f/%.1f us\n",
      label, bench::percentile(polled, 0.5) * 1e6, bench::percentile(polled, 0.99) * 1e6,
      bench::percentile(called, 0.5) * 1e6, bench::percentile(called, 0.99) * 1e6);
}

int copy_bandwidth(const bench::options& o) {
  const auto sizes = bench::sweep(o);
  bps::local::nccl_detail::pinned host(sizes.back(), "the benchmark");
  std::memset(host.data(), 1, host.size());  // touch every page before timing
  device_memory dev(sizes.back());
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaDeviceProp prop{};
  cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf(
      "# copy bandwidth on %s (%d copy engines), pinned host memory, one stream, p50 of "
      "%d + %d warmup; GB = 1e9 bytes\n",
      prop.name, prop.asyncEngineCount, o.iters, o.warmup);
  host_latency(dev.p, host.data(), cudaMemcpyHostToDevice, stream, "h2d");
  host_latency(host.data(), dev.p, cudaMemcpyDeviceToHost, stream, "d2h");
  std::printf("#%11s %12s %12s %12s %12s\n", "size", "h2d_us", "h2d_GBps", "d2h_us", "d2h_GBps");
  for (std::size_t bytes : sizes) {
    const double h2d = copy_seconds(dev.p, host.data(), bytes, cudaMemcpyHostToDevice, stream, o);
    const double d2h = copy_seconds(host.data(), dev.p, bytes, cudaMemcpyDeviceToHost, stream, o);
    std::printf("%12zu %12.1f %12.2f %12.1f %12.2f\n", bytes, h2d * 1e6,
                static_cast<double>(bytes) / h2d / 1e9, d2h * 1e6,
                static_cast<double>(bytes) / d2h / 1e9);
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  return 0;
}

int sweep_job(const bench::options& o) {
  const bps::Config cfg = bps::Config::from_env();
  Comm comm(cfg);
  int devices = 0;
  cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  cuda(cudaSetDevice(devices == 1 ? 0 : comm.local_rank()), "cudaSetDevice");  // as nccl picks
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const auto sizes = bench::sweep(o);
  device_memory data(sizes.back());
  std::string tensor;

  bench::backend b;
  b.name = "byteps (device buffers, bps::local::nccl)";
  b.rank = comm.rank();
  b.size = comm.size();
  b.servers = cfg.num_servers;
  b.prepare = [&](bps::dtype t, std::size_t bytes) {
    tensor = fmt::format("gpu-bench.{}.{}", bps::dtype_name(t), bytes);
  };
  // The copy goes on the stream that push_pull is given: the operation starts after the work
  // queued there. (A plain cudaMemcpy from pageable memory can return before its DMA lands,
  // and the legacy stream it uses does not order a non-blocking stream.)
  b.upload = [&](void* host, std::size_t bytes) {
    cuda(cudaMemcpyAsync(data.p, host, bytes, cudaMemcpyHostToDevice, stream),
         "cudaMemcpyAsync to the device");
  };
  b.download = [&](void* host, std::size_t bytes) {
    cuda(cudaMemcpy(host, data.p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
  };
  b.all_reduce = [&](void*, std::size_t count, bps::dtype t) {
    comm.push_pull(tensor, data.p, count, t, {.stream = stream}).wait();
  };
  b.barrier = [&] { comm.barrier(); };
  // bps::local::nccl takes device memory only, so the statistics travel through the device too.
  b.sum_doubles = [&](std::vector<double>& v) {
    const std::size_t bytes = v.size() * sizeof(double);
    device_memory stats(bytes);
    cuda(cudaMemcpyAsync(stats.p, v.data(), bytes, cudaMemcpyHostToDevice, stream),
         "cudaMemcpyAsync");
    comm.push_pull(fmt::format("gpu-bench.stats.{}", v.size()), stats.p, v.size(),
                   bps::dtype::float64, {.stream = stream})
        .wait();
    cuda(cudaMemcpy(v.data(), stats.p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  };
  if (b.rank == 0) {
    cudaDeviceProp prop{};
    cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::fprintf(stderr, "bps-gpu-bench: %d workers, %d servers, local size %d, device %s\n",
                 b.size, cfg.num_servers, comm.local_size(), prop.name);
  }
  const double wrong = bench::run_sweep(o, b);
  comm.barrier();
  cudaStreamDestroy(stream);
  if (wrong != 0) {
    if (b.rank == 0) std::fprintf(stderr, "bps-gpu-bench: %.0f wrong elements\n", wrong);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::options opts;
  bool copy = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a == "--help" || a == "-h") {
        usage(stdout);
        return 0;
      }
      if (a == "--copy") {
        copy = true;
        continue;
      }
      if (!bench::parse_common(opts, argc, argv, i))
        throw bench::usage_error("unknown flag '" + std::string(a) + "' (see --help)");
    }
    bench::validate(opts);
  } catch (const bench::usage_error& e) {
    std::fprintf(stderr, "bps-gpu-bench: %s\n", e.what());
    return 2;
  }
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    std::printf("bps-gpu-bench: SKIPPED: no CUDA device (cudaGetDeviceCount: %s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return skip_code;
  }
  try {
    return copy ? copy_bandwidth(opts) : sweep_job(opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bps-gpu-bench: %s\n", e.what());
    return 1;
  }
}
