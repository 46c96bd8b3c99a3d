#pragma once
/// @file
/// `bps::SchedulerNode<Transport>`: the scheduler role (DMLC_ROLE=scheduler), whose work
/// (rendezvous, barriers, the job's end, failures and failover) rendezvous/scheduler.hpp's
/// `rendezvous::scheduler` does.
///
/// This header declares it with the transport only named; the bodies are in
/// rendezvous/impl/scheduler_node.hpp, included here in header-only mode. In compiled mode
/// (`BYTEPS_COMPILED`) the shipped transports' schedulers come from the library
/// `byteps::compiled` (docs/architecture.md, "Compiled mode").

#include <chrono>
#include <cstdint>
#include <memory>

#include "byteps/core/config.hpp"
#include "byteps/transport/fwd.hpp"

namespace bps {

namespace testing {
struct scheduler_access;  // the tests' way into a scheduler; not defined by the library
}  // namespace testing

namespace rendezvous {
template <class T>
class scheduler;  // rendezvous/scheduler.hpp
struct gate_counts;  // rendezvous/gate.hpp
}  // namespace rendezvous

template <class T>
class SchedulerNode {
 public:
  using transport_options = transport::options_t<T>;

  /// The options a scheduler's transport is built with when none are given: the environment's
  /// (`T::options::from(cfg)`) less polling. The scheduler is off the data path, so its I/O
  /// threads sleep at once whatever BYTEPS_IO_POLL_US says: polling would only take a core from
  /// the workers and servers beside it.
  static transport_options default_transport_options(Config cfg) {
    cfg.io_poll = std::chrono::microseconds(0);
    return transport_options::from(cfg);
  }

  /// Listens on `scheduler_host:scheduler_port` (port 0: any free port; see `port()`). The
  /// transport is built with `transport_options`, or without them with
  /// `default_transport_options(cfg)`. `T` must model `Transport`: checked here.
  explicit SchedulerNode(const Config& cfg);
  SchedulerNode(const Config& cfg, const transport_options& options);
  SchedulerNode(const SchedulerNode&) = delete;
  SchedulerNode& operator=(const SchedulerNode&) = delete;
  ~SchedulerNode();

  std::uint16_t port() const noexcept;

  /// Connections refused before their hello, by reason (rendezvous/gate.hpp).
  rendezvous::gate_counts refused_connections() const;

  /// Runs the job's control plane; returns when every worker said bye and the servers were told
  /// to exit. Throws `communicator_error` when rendezvous times out or a node dies.
  void run();

 private:
  friend struct testing::scheduler_access;
  std::unique_ptr<rendezvous::scheduler<T>> scheduler_;
};

}  // namespace bps

#if defined(BYTEPS_COMPILED)
#include "byteps/rendezvous/scheduler_instances.hpp"
#else
#include "byteps/rendezvous/impl/scheduler_node.hpp"
#endif
