#pragma once
/// @file
/// Compiled mode with CUDA (`BYTEPS_COMPILED_NCCL`, set by this project's
/// `byteps_compiled_nccl`): the communicator over `local::nccl` that the library holds
/// (src/communicator_nccl.cpp), declared here so the programs that link it do not instantiate
/// it again. <byteps/byteps.hpp> includes this header only where that is set: it needs CUDA's
/// and NCCL's headers.

#include "byteps/local/nccl.hpp"
#include "byteps/transport/fwd.hpp"
#include "byteps/worker/communicator.hpp"

namespace bps {

extern template class Communicator<transport::tcp, local::nccl>;

}  // namespace bps
