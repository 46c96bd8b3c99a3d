#pragma once
/// @file
/// The libtorch plugin (CMake: `find_package(byteps CONFIG REQUIRED COMPONENTS torch)`, target
/// `byteps::torch`): `bps::torch::DistributedOptimizer`, `broadcast_parameters`,
/// `broadcast_optimizer_state` and the dtype mapping. Include it beside <byteps/byteps.hpp>,
/// which does not include it (libtorch is an optional dependency).

#include "byteps/torch/accumulation_hooks.hpp"
#include "byteps/torch/broadcast.hpp"
#include "byteps/torch/distributed_optimizer.hpp"
#include "byteps/torch/dtype.hpp"
#include "byteps/torch/tensor_check.hpp"
