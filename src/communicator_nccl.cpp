// byteps_compiled_nccl: the communicator over transport::tcp and local::nccl, instantiated once
// for this project's GPU programs and tests (worker/communicator_nccl_instances.hpp declares it
// extern). Its CUDA and NCCL calls are resolved where it is linked: by libcudart and libnccl, or
// by the CPU model of both in tests/gpu.
#include <byteps/bodies.hpp>
#include <byteps/local/nccl.hpp>

namespace bps {

template class Communicator<transport::tcp, local::nccl>;

}  // namespace bps
