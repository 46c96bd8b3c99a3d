#pragma once
// Knobs of the fake CUDA runtime and NCCL in fake_cuda.cpp and fake_nccl.cpp (tests without a GPU).
#include <cstddef>

namespace fake_device {

/// What cudaGetDeviceCount reports (default 4; 0 makes it fail with cudaErrorNoDevice).
void set_device_count(int n);
/// "Device memory" of the calling thread's current device (cudaSetDevice): host memory that
/// cudaPointerGetAttributes reports as device memory.
void* device_alloc(std::size_t bytes);
void device_free(void* p);
/// Streams and NCCL communicators not yet destroyed or aborted.
int live_streams();
int live_comms();
/// ncclReduce and ncclBroadcast calls so far, by communicators of `nranks` ranks.
long collectives(int nranks);

}  // namespace fake_device
