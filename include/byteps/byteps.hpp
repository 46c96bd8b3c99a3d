#pragma once
/// @file
/// byteps: BytePS-style gradient exchange through summation servers, header-only C++20.
///
///   bps::Communicator<> comm(bps::Config::from_env());  // the defaults: transport/standard.hpp
///   comm.push_pull("layer0.weight", std::span(grad), {.priority = 3, .average = true}).wait();
///
/// What a program names: the communicator, the server and the scheduler, their configuration,
/// and the shipped policies. Header-only (the default), this also brings every body they need.
/// In compiled mode (`BYTEPS_COMPILED`, set by the CMake target `byteps::compiled`) it brings
/// declarations only, and the shipped policies' instantiations come from the library; a
/// translation unit that instantiates policies of its own includes <byteps/bodies.hpp>
/// (docs/architecture.md, "Compiled mode").

#include "byteps/compress/compressor.hpp"
#include "byteps/compress/registry.hpp"
#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/push_pull_options.hpp"
#include "byteps/local/fwd.hpp"
#include "byteps/partition/by_bytes.hpp"
#include "byteps/rendezvous/scheduler_node.hpp"
#include "byteps/schedule/priority.hpp"
#include "byteps/server/fwd.hpp"
#include "byteps/server/server.hpp"
#include "byteps/transport/fwd.hpp"
#include "byteps/version.hpp"
#include "byteps/worker/communicator.hpp"
#include "byteps/worker/stats.hpp"

#if !defined(BYTEPS_COMPILED)
#include "byteps/bodies.hpp"
#endif
#if defined(BYTEPS_COMPILED_NCCL)
#include "byteps/worker/communicator_nccl_instances.hpp"
#endif
