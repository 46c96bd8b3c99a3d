// bps::local::nccl without a GPU: what can be checked on any machine that has the CUDA and NCCL
// headers and libraries (CI): the policy satisfies LocalCollective and plugs into a
// Communicator, dtypes map to NCCL's, CUDA and NCCL errors are wrapped with the call and the
// library's message, and a process with no CUDA device is told so plainly.
#include <byteps/local/nccl.hpp>

#include <byteps/bodies.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

using namespace bps;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int visible_devices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace

static_assert(LocalCollective<local::nccl>);
using NcclComm =
    Communicator<transport::tcp, local::nccl, partition::by_bytes, schedule::priority>;
static_assert(!local::nccl::is_identity, "the NCCL stage is a real local collective");

TEST_CASE("nccl: every dtype maps to its NCCL type", "[nccl]") {
  using local::nccl_detail::nccl_type;
  CHECK(nccl_type(dtype::float32) == ncclFloat32);
  CHECK(nccl_type(dtype::float64) == ncclFloat64);
  CHECK(nccl_type(dtype::float16) == ncclFloat16);
  CHECK(nccl_type(dtype::bfloat16) == ncclBfloat16);
  CHECK(nccl_type(dtype::int8) == ncclInt8);
  CHECK(nccl_type(dtype::uint8) == ncclUint8);
  CHECK(nccl_type(dtype::int32) == ncclInt32);
  CHECK(nccl_type(dtype::int64) == ncclInt64);
  CHECK_THROWS_AS(nccl_type(static_cast<dtype>(200)), usage_error);
}

TEST_CASE("nccl: CUDA errors name the operation, the call and CUDA's message", "[nccl]") {
  using local::nccl_detail::cuda_check;
  CHECK_NOTHROW(cuda_check(cudaSuccess, "cudaFoo", "push_pull of 'w'"));
  try {
    cuda_check(cudaErrorInvalidValue, "cudaMemcpyAsync", "push_pull of 'w'");
    FAIL("no exception");
  } catch (const communicator_error& e) {
    CHECK(contains(e.what(), "push_pull of 'w': cudaMemcpyAsync failed: "));
    CHECK(contains(e.what(), cudaGetErrorString(cudaErrorInvalidValue)));
    CHECK(contains(e.what(), "cudaErrorInvalidValue"));
  }
  CHECK_THROWS_AS(cuda_check<usage_error>(cudaErrorInvalidResourceHandle, "cudaEventRecord", "x"),
                  usage_error);
}

TEST_CASE("nccl: NCCL errors name the call and NCCL's message - in-progress is no error",
          "[nccl]") {
  using local::nccl_detail::nccl_check;
  CHECK_NOTHROW(nccl_check(ncclSuccess, nullptr, "ncclReduce", "x"));
  CHECK_NOTHROW(nccl_check(ncclInProgress, nullptr, "ncclGroupEnd", "x"));
  try {
    nccl_check(ncclInvalidUsage, nullptr, "ncclBroadcast", "push_pull of 'w'");
    FAIL("no exception");
  } catch (const communicator_error& e) {
    CHECK(contains(e.what(), "push_pull of 'w': ncclBroadcast failed: "));
    CHECK(contains(e.what(), ncclGetErrorString(ncclInvalidUsage)));
  }
}

TEST_CASE("nccl: an operation before attach and after shutdown is a usage error", "[nccl]") {
  Config cfg;
  local::nccl n(cfg);
  CHECK(n.local_rank() == 0);
  CHECK(n.local_size() == 1);
  local::work w;
  w.name = "w";
  w.what = "push_pull of 'w'";
  w.count = 4;
  local::nccl::step_state s;
  try {
    n.begin(w, s);
    FAIL("no exception");
  } catch (const usage_error& e) {
    CHECK(contains(e.what(), "not attached"));
  }
  n.shutdown();
  n.shutdown();  // idempotent
  CHECK_THROWS_AS(n.begin(w, s), usage_error);
}

TEST_CASE("nccl: a process with no CUDA device is told so when the policy attaches", "[nccl]") {
  if (visible_devices() > 0) {
    WARN("this machine has a CUDA device: the no-device message is not checked here (the GPU "
         "process tests run instead)");
    return;
  }
  Config cfg;
  local::nccl n(cfg);
  try {
    n.attach(local::cluster{});
    FAIL("attach succeeded without a CUDA device");
  } catch (const usage_error& e) {
    CHECK(contains(e.what(), "no CUDA device is visible to this process"));
    CHECK(contains(e.what(), "bps::local::host"));
  }
  n.shutdown();
}

TEST_CASE("nccl: the local stage polls the device a while before it sleeps - host policies do not",
          "[nccl]") {
  using namespace std::chrono_literals;
  struct sleeps_at_once {};
  struct polls {
    std::chrono::nanoseconds poll_window() const { return 5us; }
  };
  CHECK(local::poll_window_of(sleeps_at_once{}) == 0ns);
  CHECK(local::poll_window_of(polls{}) == 5us);
  const Config cfg;
  const local::nccl gpu(cfg);
  const local::host cpu(cfg);
  CHECK(local::poll_window_of(gpu) > 0ns);
  CHECK(local::poll_window_of(cpu) == 0ns);
}
