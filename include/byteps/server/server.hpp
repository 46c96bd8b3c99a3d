#pragma once
/// @file
/// `bps::Server<Transport, Handler>`: a summation server, built from the same headers as the
/// workers so that an application can run one with its own transport (`tools/byteps_server.cpp`
/// is the shipped one, a few lines) or its own request handler (`handler.hpp`). The default
/// handler, `server::decoding<server::sync_sum>`, decodes compressed pushes and sums one round
/// from every worker, then answers them all.
///
/// This class is the public face; the server itself is `server::node` (server/node.hpp), as
/// `worker::node` is behind `Communicator`. This header declares it with the policies only
/// named; the bodies are in server/impl/server.hpp, included here in header-only mode. In
/// compiled mode (`BYTEPS_COMPILED`) the shipped transports' servers come from the library
/// `byteps::compiled` (docs/architecture.md, "Compiled mode").
///
/// Failover (`Config::failover_timeout` > 0): a standby server (`Config::server_standby`) waits
/// in its constructor until the scheduler gives it a dead server's rank, or the job ends (then
/// `run()` returns at once).
///
/// @par Thread Safety
/// Construct and `run()` on one thread. The server runs its own I/O and engine threads.

#include <cstdint>
#include <memory>

#include "byteps/core/config.hpp"
#include "byteps/server/fwd.hpp"
#include "byteps/transport/fwd.hpp"

namespace bps {

namespace compress {
class registry;  // compress/registry.hpp
}  // namespace compress

namespace testing {
struct server_access;  // the tests' way into a server; not defined by the library
}  // namespace testing

namespace server {
template <class T, class H>
class node;  // server/node.hpp
}  // namespace server

template <class T = transport::standard, class H = server::decoding<server::sync_sum>>
class Server {
 public:
  using handler_type = H;
  using transport_options = transport::options_t<T>;

  /// Connects to the scheduler, listens for workers, and joins the cluster (blocks until every
  /// node joined, at most `Config::rendezvous_timeout`; a standby blocks until it replaces a
  /// dead server or the job ends). The transport is built with `transport_options`, or without
  /// them with `T::options::from(cfg)` (the environment's). `T` must model `Transport` and `H`
  /// `ServerHandler`: both are checked here.
  explicit Server(const Config& cfg);
  Server(const Config& cfg, const transport_options& options);
  /// `compressors` makes the compressors of the tensors that workers declare with one the
  /// servers decode (the built-ins by default; add a prototype's own with `registry::add`).
  Server(const Config& cfg, const transport_options& options, compress::registry compressors);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();

  /// This server's rank; -1 for a standby that was never needed.
  int rank() const noexcept;
  std::uint16_t port() const noexcept;

  /// Serves until the scheduler ends the job. Throws `communicator_error` when the cluster
  /// fails (a node died, the scheduler vanished).
  void run();

 private:
  friend struct testing::server_access;
  std::unique_ptr<server::node<T, H>> node_;
};

}  // namespace bps

#if defined(BYTEPS_COMPILED)
#include "byteps/server/server_instances.hpp"
#else
#include "byteps/server/impl/server.hpp"
#endif
