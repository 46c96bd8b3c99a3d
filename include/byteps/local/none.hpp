#pragma once
/// @file
/// `bps::local::none`: one process per machine (or per device, each its own "machine"); no local
/// stage. Every process talks to the servers directly.

#include <span>
#include <string_view>

#include "byteps/local/local_collective.hpp"

namespace bps::local {

class none {
 public:
  static constexpr bool is_identity = true;
  explicit none(const Config&) {}
  int local_rank() const noexcept { return 0; }
  int local_size() const noexcept { return 1; }
  std::span<std::byte> reduce_scatter(std::string_view, std::span<std::byte> data, dtype) {
    return data;
  }
  void all_gather(std::string_view, std::span<std::byte>, dtype) {}
};

static_assert(LocalCollective<none>);

}  // namespace bps::local
