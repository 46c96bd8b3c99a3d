#pragma once
/// @file
/// The `bps::LocalCollective` concept: what the processes of one machine do together before
/// and after the machine talks to the servers (BytePS's local reduce and local broadcast).
///
/// `reduce_scatter` sums a tensor over the machine's local ranks and returns the slice of it
/// that this local rank push_pulls; after the slice's sum comes back from the servers,
/// `all_gather` gives every local rank the whole summed tensor. With one process per machine
/// (`bps::local::none`) both are identities and the communicator skips them at compile time
/// (`is_identity`). The host (shared-memory) and NCCL policies plug in here; see
/// docs/architecture.md.

#include <concepts>
#include <span>
#include <string_view>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"

namespace bps {

template <class L>
concept LocalCollective =
    std::constructible_from<L, const Config&> &&
    requires(L& l, const L& cl, std::string_view name, std::span<std::byte> data, dtype t) {
      { L::is_identity } -> std::convertible_to<bool>;
      { cl.local_rank() } -> std::convertible_to<int>;
      { cl.local_size() } -> std::convertible_to<int>;
      { l.reduce_scatter(name, data, t) } -> std::same_as<std::span<std::byte>>;
      l.all_gather(name, data, t);
    };

}  // namespace bps
