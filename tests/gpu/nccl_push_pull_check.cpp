// The NCCL local stage as real processes: device buffers of every dtype at odd sizes, pushed
// through bps::local::nccl and the servers, compared element by element with the exact
// reference sum. Two roles in one program:
//
//   nccl_push_pull_check --probe
//       exits 0 when this machine has a CUDA device, else prints "SKIPPED: no CUDA device (...)"
//       and exits 77 (CTest's SKIP_RETURN_CODE). Other tests run it first.
//   nccl_push_pull_check --launch BYTEPS_LAUNCH [--workers W] [--servers S] [--local-size L]
//       probes, also that the machine has L devices (NCCL puts no two ranks of one communicator
//       on one device; exit 77 with a message when it has fewer), then runs BYTEPS_LAUNCH with
//       this program as every worker process.
//   nccl_push_pull_check            (as a worker process, under byteps-launch)
//
// Each worker allocates its buffers on the device its local rank uses, fills them on its own
// stream, and waits half of its handles on the host (handle::wait) and half on that stream
// (handle::device_event). It also checks a broadcast from the last rank, an empty tensor, and
// that host memory is refused with a usage_error.
#include <byteps/bodies.hpp>
#include <byteps/local/nccl.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cluster/values.hpp"

namespace {

using Comm = bps::Communicator<bps::transport::tcp, bps::local::nccl, bps::partition::by_bytes,
                               bps::schedule::priority>;

constexpr int skip_code = 77;

// The number of CUDA devices, or -1 with `why` filled when CUDA cannot tell.
int device_count(std::string& why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return -1;
  }
  return n;
}

int probe(int local_size) {
  std::string why;
  const int n = device_count(why);
  if (n <= 0) {
    std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s); the NCCL local stage needs a "
                "GPU, so this test did not run\n",
                n < 0 ? why.c_str() : "0 devices");
    return skip_code;
  }
  if (n < local_size) {
    std::printf("SKIPPED: %d local ranks per machine need %d CUDA devices (NCCL does not allow "
                "two ranks of one communicator on one device); this machine has %d\n",
                local_size, local_size, n);
    return skip_code;
  }
  return 0;
}

struct fail : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw fail(std::string(call) + " failed: " + cudaGetErrorName(e) + ": " +
               cudaGetErrorString(e));
}

struct device_buffer {
  explicit device_buffer(std::size_t bytes) {
    cuda(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  void* p = nullptr;
};

int worker() {
  const bps::Config cfg = bps::Config::from_env();
  Comm comm(cfg);
  const int rank = comm.rank(), workers = comm.size();
  int devices = 0;
  cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int device = devices == 1 ? 0 : comm.local_rank();  // as bps::local::nccl picks it
  cuda(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  std::printf("worker %d of %d (machine %d local rank %d of %d) on CUDA device %d\n", rank,
              workers, comm.machine(), comm.local_rank(), comm.local_size(), device);
  std::fflush(stdout);

  const std::size_t sizes[] = {1, 7, 1023, 4097, 100003, 1100007};
  const int rounds = 5;
  std::size_t checked = 0;
  for (int round = 0; round < rounds; ++round) {
    struct item {
      bps::dtype type;
      std::size_t count;
      std::vector<std::byte> host;
      std::unique_ptr<device_buffer> dev;
      bps::handle h;
    };
    std::vector<item> items;
    for (bps::dtype t : bps::all_dtypes)
      for (std::size_t n : sizes) {
        item it{t, n, bps::test::fill(t, n, rank, round),
                std::make_unique<device_buffer>(n * bps::dtype_size(t)), {}};
        cuda(cudaMemcpyAsync(it.dev->p, it.host.data(), it.host.size(), cudaMemcpyHostToDevice,
                             stream),
             "cudaMemcpyAsync to the device");
        items.push_back(std::move(it));
      }
    // push_pull orders itself after the copies above: they are on the stream it is given.
    for (std::size_t k = 0; k < items.size(); ++k) {
      auto& it = items[k];
      it.h = comm.push_pull(fmt::format("{}x{}", bps::dtype_name(it.type), it.count), it.dev->p,
                            it.count, it.type,
                            {.priority = static_cast<int>(k % 3), .stream = stream});
    }
    // Half waited on the host, half on the stream; every handle is done before any check.
    std::exception_ptr failed;
    for (std::size_t k = 0; k < items.size(); ++k) {
      auto& it = items[k];
      try {
        if (k % 2 == 0) {
          it.h.wait();
          cuda(cudaMemcpy(it.host.data(), it.dev->p, it.host.size(), cudaMemcpyDeviceToHost),
               "cudaMemcpy to the host");
        } else {
          auto* event = static_cast<cudaEvent_t>(it.h.device_event());
          if (event == nullptr) throw fail("handle::device_event() is null for a device buffer");
          cuda(cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
          cuda(cudaMemcpyAsync(it.host.data(), it.dev->p, it.host.size(), cudaMemcpyDeviceToHost,
                               stream),
               "cudaMemcpyAsync to the host");
        }
      } catch (...) {
        if (!failed) failed = std::current_exception();
      }
    }
    for (auto& it : items) {
      try {
        it.h.wait();
      } catch (...) {
        if (!failed) failed = std::current_exception();
      }
    }
    cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (failed) std::rethrow_exception(failed);
    for (auto& it : items) {
      const auto wrong = bps::test::first_wrong(it.type, it.host, it.count, workers, round);
      if (wrong != it.count)
        throw fail(fmt::format("{} x {} round {}: element {} is not the sum over {} workers",
                               bps::dtype_name(it.type), it.count, round, wrong, workers));
      checked += it.count;
    }
  }

  // Broadcast from the last rank: every worker ends with its values, bit for bit.
  {
    const std::size_t n = 4099;
    const int root = workers - 1;
    auto host = bps::test::fill(bps::dtype::float32, n, rank, 100);
    device_buffer dev(host.size());
    cuda(cudaMemcpy(dev.p, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    comm.broadcast("bcast", dev.p, n, bps::dtype::float32, root).wait();
    cuda(cudaMemcpy(host.data(), dev.p, host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (host != bps::test::fill(bps::dtype::float32, n, root, 100))
      throw fail(fmt::format("broadcast from rank {}: the buffer is not the root's", root));
  }
  // An empty tensor completes at once, with an event a stream can wait on.
  {
    device_buffer dev(4);
    auto h = comm.push_pull("empty", dev.p, 0, bps::dtype::float32, {.stream = stream});
    h.wait();
    if (h.device_event() == nullptr) throw fail("an empty tensor's handle has no device event");
  }
  // Host memory is refused with a message saying what to use.
  {
    std::vector<float> host(16, 1.0f);
    try {
      comm.push_pull("host", std::span<float>(host)).wait();
      throw fail("push_pull of host memory through bps::local::nccl did not throw");
    } catch (const bps::usage_error& e) {
      if (std::string(e.what()).find("device memory") == std::string::npos)
        throw fail(std::string("host memory was refused, but the message does not say why: ") +
                   e.what());
    }
  }
  comm.barrier();
  cudaStreamDestroy(stream);
  std::printf("worker %d of %d: %zu elements of device buffers equal the reference sums\n", rank,
              workers, checked);
  return 0;
}

int launch(int argc, char** argv) {
  std::string launcher, workers = "2", servers = "2", local_size = "1";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--launch") launcher = argv[i + 1];
    else if (a == "--workers") workers = argv[i + 1];
    else if (a == "--servers") servers = argv[i + 1];
    else if (a == "--local-size") local_size = argv[i + 1];
    else {
      std::fprintf(stderr, "nccl_push_pull_check: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (int rc = probe(std::atoi(local_size.c_str())); rc != 0) return rc;
  std::string self = argv[0];
  char path[4096];
  if (const auto n = ::readlink("/proc/self/exe", path, sizeof path - 1); n > 0)
    self.assign(path, static_cast<std::size_t>(n));
  std::vector<std::string> args = {launcher,     "--workers",    workers,   "--servers", servers,
                                   "--local-size", local_size, "--timeout", "240",     "--",
                                   self};
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(stdout);
  ::execv(launcher.c_str(), cargs.data());
  std::fprintf(stderr, "nccl_push_pull_check: cannot run %s: %s\n", launcher.c_str(),
               std::strerror(errno));
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::strcmp(argv[1], "--probe") == 0) return probe(1);
    if (argc >= 3 && std::strcmp(argv[1], "--launch") == 0) return launch(argc, argv);
    if (int rc = probe(1); rc != 0) return rc;
    return worker();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_push_pull_check: %s\n", e.what());
    return 1;
  }
}
