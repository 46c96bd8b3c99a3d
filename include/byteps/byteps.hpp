#pragma once
/// @file
/// byteps: BytePS-style gradient exchange through summation servers, header-only C++20.
///
///   bps::Communicator<> comm(bps::Config::from_env());  // the defaults: transport/standard.hpp
///   comm.push_pull("layer0.weight", std::span(grad), {.priority = 3, .average = true}).wait();
///
/// One include per layer, as the folders are laid out.

#include "byteps/compress/compressor.hpp"
#include "byteps/compress/registry.hpp"
#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/local/host.hpp"
#include "byteps/local/none.hpp"
#include "byteps/partition/by_bytes.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/rendezvous/auth.hpp"
#include "byteps/rendezvous/gate.hpp"
#include "byteps/rendezvous/handshake.hpp"
#include "byteps/rendezvous/scheduler_node.hpp"
#include "byteps/schedule/fifo.hpp"
#include "byteps/schedule/priority.hpp"
#include "byteps/server/async_sum.hpp"
#include "byteps/server/server.hpp"
#include "byteps/transport/ipc.hpp"
#include "byteps/transport/ipc_options.hpp"
#include "byteps/transport/tcp.hpp"
#include "byteps/transport/tcp_options.hpp"
#include "byteps/transport/standard.hpp"
#include "byteps/version.hpp"
#include "byteps/worker/communicator.hpp"
