#pragma once
// The tests' accessor to a SchedulerNode's internals (the friend that scheduler_node.hpp
// declares): its log, to wait for what it did instead of sleeping.
#include <byteps/rendezvous/impl/scheduler_node.hpp>

namespace bps::testing {

struct scheduler_access {
  /// The scheduler's logger, to capture its lines with `logger::set_sink`. Any thread.
  template <class T>
  static logger& log(SchedulerNode<T>& scheduler) {
    return scheduler.scheduler_->log_;
  }
};

}  // namespace bps::testing
