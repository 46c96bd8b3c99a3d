#pragma once
/// @file
/// `bps::transport::rdma`: the RDMA transport over rdma-core, so a job runs as
/// `Communicator<transport::rdma, ...>` and `Server<transport::rdma>`. It is
/// `basic_rdma<rdma_core>` (rdma/basic_rdma.hpp says how it works; rdma/rdma_core.hpp what it
/// asks of rdma-core). Link `byteps::rdma` (CMake: BYTEPS_WITH_RDMA). Not included by
/// byteps.hpp, which needs no rdma-core.

#include "byteps/transport/rdma/basic_rdma.hpp"
#include "byteps/transport/rdma/rdma_core.hpp"

namespace bps::transport {

using rdma = basic_rdma<rdma_core>;

static_assert(bps::Transport<rdma>);

}  // namespace bps::transport
