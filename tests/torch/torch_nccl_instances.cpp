// Compiled, never run: the plugin instantiated for a communicator of CUDA buffers
// (bps::local::nccl), in builds with CUDA and Torch. Debian's libtorch is CPU-only, so no
// CUDA tensor exists here to exchange (docs/status.md says what has run).
#include <byteps/byteps.hpp>
#include <byteps/local/nccl.hpp>
#include <byteps/torch.hpp>

using nccl_comm = bps::Communicator<bps::transport::tcp, bps::local::nccl>;

template class bps::torch::DistributedOptimizer<nccl_comm>;
template void bps::torch::broadcast_parameters<nccl_comm>(nccl_comm&, const ::torch::nn::Module&,
                                                          int, const std::string&);
template void bps::torch::broadcast_optimizer_state<nccl_comm>(nccl_comm&,
                                                               ::torch::optim::Optimizer&, int,
                                                               const std::string&);
static_assert(bps::torch::DistributedOptimizer<nccl_comm>::home == bps::torch::buffer_home::cuda);
