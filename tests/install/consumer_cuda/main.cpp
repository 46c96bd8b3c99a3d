// A program outside byteps built against an installed byteps with the cuda component: the NCCL
// local collective plugs into a Communicator, and the CUDA runtime and NCCL link. It needs no
// GPU: it reports what it finds and exits 0.
#include <byteps/byteps.hpp>
#include <byteps/local/nccl.hpp>

#include <cstdio>

using Comm = bps::Communicator<bps::transport::tcp, bps::local::nccl, bps::partition::by_bytes,
                               bps::schedule::priority>;
static_assert(bps::LocalCollective<bps::local::nccl>);

int main() {
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  std::printf("consumer_cuda: byteps %s with NCCL %d; %d CUDA device(s)%s%s\n", bps::version,
              nccl_version, e == cudaSuccess ? devices : 0, e == cudaSuccess ? "" : ": ",
              e == cudaSuccess ? "" : cudaGetErrorString(e));
  return 0;
}
