#pragma once
/// @file
/// Everything byteps.hpp declares, with its bodies: the shipped policies' definitions and the
/// bodies of `Communicator`, `Server` and `SchedulerNode`. byteps.hpp includes it in
/// header-only mode. In compiled mode (`BYTEPS_COMPILED`) include it in the translation units
/// that build a communicator, server or scheduler of policies the library does not hold (a
/// transport or handler of one's own); the library's instantiations are still not compiled again
/// (docs/architecture.md, "Compiled mode").

#include "byteps/byteps.hpp"
#include "byteps/local/host.hpp"
#include "byteps/local/none.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/rendezvous/auth.hpp"
#include "byteps/rendezvous/gate.hpp"
#include "byteps/rendezvous/handshake.hpp"
#include "byteps/rendezvous/impl/scheduler_node.hpp"
#include "byteps/schedule/fifo.hpp"
#include "byteps/server/async_sum.hpp"
#include "byteps/server/decoding.hpp"
#include "byteps/server/impl/server.hpp"
#include "byteps/server/sync_sum.hpp"
#include "byteps/transport/ipc/ipc.hpp"
#include "byteps/transport/ipc/ipc_options.hpp"
#include "byteps/transport/standard.hpp"
#include "byteps/transport/tcp/tcp.hpp"
#include "byteps/transport/tcp/tcp_options.hpp"
#include "byteps/worker/impl/communicator.hpp"
