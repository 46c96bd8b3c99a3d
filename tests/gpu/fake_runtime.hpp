#pragma once
// What the fake NCCL (fake_nccl.cpp) needs of the fake CUDA runtime (fake_cuda.cpp).
#include <cuda_runtime_api.h>

#include <functional>

namespace fake_device::runtime {

/// The calling thread's device (cudaSetDevice).
int current_device();
/// Runs `f` on stream `s`'s thread after what is queued there, or now for the legacy default
/// stream (nullptr); cudaErrorInvalidResourceHandle for an unknown stream.
cudaError_t enqueue(cudaStream_t s, std::function<void()> f);

}  // namespace fake_device::runtime
