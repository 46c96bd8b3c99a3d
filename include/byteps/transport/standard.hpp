#pragma once
/// @file
/// `bps::transport::standard`: the transport of a `Communicator<>` or `Server<>` that names none.
/// It picks per peer, as NCCL picks a transport per pair of ranks: payloads between a worker
/// and a server on the same host go through shared memory (`ipc`), everything else over TCP.
/// A job on one machine thus skips the kernel's TCP stack for its payloads without anyone
/// having to ask, and a job across machines is plain TCP to its remote servers.
/// `BYTEPS_ENABLE_IPC=0` turns the shared-memory path off (`ipc_options::enabled`).
///
/// Name another transport to get another: `transport::tcp` alone, `transport::tls<tcp>`,
/// `transport::rdma`.

#include "byteps/transport/fwd.hpp"
#include "byteps/transport/ipc/ipc.hpp"
#include "byteps/transport/tcp/tcp.hpp"

// `transport::standard` itself is declared in transport/fwd.hpp, so a trainer can name it
// without these definitions.
