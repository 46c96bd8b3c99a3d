#pragma once
/// @file
/// `bps::transport::faulty_options<InnerOptions>` (`transport::faulty<Inner>::options`): the
/// fault plan a `faulty` transport consults, and the options of the transport underneath. The
/// plan travels in this value, handed to the node's constructor, so it reaches exactly the nodes
/// a test gives it to, on any thread, with no global or thread-local slot.

#include <memory>

#include "byteps/core/config.hpp"
#include "byteps/transport/faulty/fault_plan.hpp"

namespace bps::transport {

template <class InnerOptions>
struct faulty_options {
  /// The rules to apply to outgoing frames; shared with the test that owns it and with the other
  /// nodes it is given to. Null: an empty plan of the transport's own (no faults).
  std::shared_ptr<fault_plan> plan{};
  InnerOptions inner{};

  /// No plan (the environment names no faults), and the inner transport's options as the
  /// environment gave them.
  static faulty_options from(const Config& cfg) {
    return {.plan = nullptr, .inner = InnerOptions::from(cfg)};
  }
};

}  // namespace bps::transport
