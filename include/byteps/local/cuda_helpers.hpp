#pragma once
/// @file
/// The CUDA and NCCL helpers of `bps::local::nccl`: error checks that name the operation and the
/// call, the NCCL type of each dtype, a scoped current device, owned events and pinned host
/// memory, and the host function that rings a machine's doorbell from a stream.

#if !__has_include(<cuda_runtime_api.h>) || !__has_include(<nccl.h>)
#error "byteps/local/cuda_helpers.hpp needs the CUDA runtime and NCCL headers: link byteps::cuda (CMake: find_package(byteps CONFIG COMPONENTS cuda)), or configure byteps with -DBYTEPS_WITH_CUDA=ON"
#endif

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/core.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/local/order_board.hpp"
#include "byteps/local/shm.hpp"

namespace bps::local {

namespace nccl_detail {

static_assert(sizeof(ncclUniqueId) <= order_board::id_bytes,
              "the order board has no room for this NCCL's unique id");

inline std::string cuda_message(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
}

/// "<what>: <call> failed: <CUDA's message> (<error name>)", as `E` (`communicator_error`
/// unless the caller passed something wrong).
template <class E = communicator_error>
void cuda_check(cudaError_t e, std::string_view call, std::string_view what) {
  if (e != cudaSuccess)
    throw E(fmt::format("{}: {} failed: {}", what, call, cuda_message(e)));
}

inline std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0')
    return fmt::format("{} ({})", ncclGetErrorString(r), last);
  return ncclGetErrorString(r);
}

/// Throws `communicator_error` for anything but ncclSuccess and ncclInProgress (a
/// non-blocking communicator's "queued; poll ncclCommGetAsyncError").
inline void nccl_check(ncclResult_t r, ncclComm_t comm, std::string_view call,
                       std::string_view what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw communicator_error(fmt::format("{}: {} failed: {}", what, call, nccl_message(r, comm)));
}

inline ncclDataType_t nccl_type(dtype t) {
  switch (t) {
    case dtype::float32: return ncclFloat32;
    case dtype::float64: return ncclFloat64;
    case dtype::float16: return ncclFloat16;
    case dtype::bfloat16: return ncclBfloat16;
    case dtype::int8: return ncclInt8;
    case dtype::uint8: return ncclUint8;
    case dtype::int32: return ncclInt32;
    case dtype::int64: return ncclInt64;
  }
  throw usage_error(fmt::format("dtype value {} has no NCCL type", static_cast<unsigned>(t)));
}

/// Makes `device` current on this thread and restores the previous one on scope exit.
class device_guard {
 public:
  device_guard(int device, std::string_view what) {
    cuda_check(cudaGetDevice(&previous_), "cudaGetDevice", what);
    if (previous_ != device) cuda_check(cudaSetDevice(device), "cudaSetDevice", what);
    else previous_ = -1;
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

/// A `cudaEvent_t` (timing off), owned; the deleter destroys it (CUDA releases it once the
/// device reached it, if it has not yet).
inline std::shared_ptr<void> make_event(std::string_view what) {
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags",
             what);
  return std::shared_ptr<void>(static_cast<void*>(e),
                               [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
}

inline cudaEvent_t event_of(const std::shared_ptr<void>& e) {
  return static_cast<cudaEvent_t>(e.get());
}

/// Page-locked host memory, so that copies to and from the device are asynchronous.
class pinned {
 public:
  pinned() = default;
  pinned(std::size_t bytes, std::string_view what) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = nullptr;
    cuda_check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
               fmt::format("cudaHostAlloc of {} bytes", bytes), what);
    p_ = static_cast<std::byte*>(p);
  }
  pinned(pinned&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  pinned& operator=(pinned&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~pinned() { reset(); }

  std::byte* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return bytes_; }

 private:
  void reset() noexcept {
    if (p_ != nullptr) cudaFreeHost(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  std::byte* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Queued on a stream after a step: wakes every local rank's stage thread. `word` is the
/// doorbell's word in shared memory (a host function must not call CUDA; this rings a futex).
inline void CUDART_CB ring_bell(void* word) {
  doorbell(static_cast<std::atomic<std::uint32_t>*>(word)).ring();
}

}  // namespace nccl_detail

}  // namespace bps::local
