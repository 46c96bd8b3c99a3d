#pragma once
/// @file
/// `bps::local::none`: one process per machine (or per device, each its own "machine"); no local
/// stage. Every process talks to the servers directly: the communicator sees `is_identity` and
/// never calls `push_pull` here.

#include <string>

#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/local/local_collective.hpp"

namespace bps::local {

class none {
 public:
  static constexpr bool is_identity = true;
  explicit none(const Config&) {}
  int local_rank() const noexcept { return 0; }
  int local_size() const noexcept { return 1; }
  void attach(const cluster&, network&) {}
  handle push_pull(request r) {
    throw usage_error(r.what + ": bps::local::none has no local stage (the communicator sends "
                               "directly)");
  }
  void fail(const std::string&) {}
  void shutdown() {}
};

static_assert(LocalCollective<none>);

}  // namespace bps::local
