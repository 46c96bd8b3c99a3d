#pragma once
/// @file
/// `bps::local::none`: one process per machine (or per device, each its own "machine"); no local
/// stage. Every process talks to the servers directly: the worker sees `is_identity` and runs
/// no local step, so the pipeline is the push and pull alone.

#include "byteps/local/local_collective.hpp"

namespace bps::local {

class none {
 public:
  static constexpr bool is_identity = true;
  explicit none(const Config&) {}
  int local_rank() const noexcept { return 0; }
  int local_size() const noexcept { return 1; }
  void attach(const cluster&) {}
  void shutdown() {}
};

static_assert(LocalCollective<none>);

}  // namespace bps::local
