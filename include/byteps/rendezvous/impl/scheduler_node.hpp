#pragma once
/// @file
/// The bodies of `bps::SchedulerNode` (rendezvous/scheduler_node.hpp). Header-only mode
/// includes them from there; in compiled mode (`BYTEPS_COMPILED`) a translation unit that
/// builds a scheduler on a transport of its own includes this header (or <byteps/bodies.hpp>).

#include <memory>

#include "byteps/rendezvous/gate.hpp"
#include "byteps/rendezvous/scheduler.hpp"
#include "byteps/rendezvous/scheduler_node.hpp"
#include "byteps/transport/standard.hpp"
#include "byteps/transport/transport.hpp"

namespace bps {

template <class T>
SchedulerNode<T>::SchedulerNode(const Config& cfg)
    : SchedulerNode(cfg, default_transport_options(cfg)) {}

template <class T>
SchedulerNode<T>::SchedulerNode(const Config& cfg, const transport_options& options) {
  static_assert(Transport<T>, "SchedulerNode<T>: T must model bps::Transport "
                              "(transport/transport.hpp)");
  scheduler_ = std::make_unique<rendezvous::scheduler<T>>(cfg, options);
}

template <class T>
SchedulerNode<T>::~SchedulerNode() = default;

template <class T>
std::uint16_t SchedulerNode<T>::port() const noexcept {
  return scheduler_->port();
}

template <class T>
rendezvous::gate_counts SchedulerNode<T>::refused_connections() const {
  return scheduler_->refused_connections();
}

template <class T>
void SchedulerNode<T>::run() {
  scheduler_->run();
}

}  // namespace bps
