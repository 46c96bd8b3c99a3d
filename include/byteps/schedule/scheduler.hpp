#pragma once
/// @file
/// The `bps::Scheduler` concept: which ready partition is sent next.
///
/// The communicator pushes a `send_task` for every partition when `push_pull` is called, then
/// sends what `pop()` gives until it gives nothing. When a popped partition has left this node
/// (the transport finished writing it), the communicator calls `sent(bytes)`, which is how a
/// scheduler bounds the bytes in flight (BytePS's credit). Credit returns when bytes *leave*,
/// not when the sum comes back: a server answers only after every worker pushed, so tying credit
/// to answers could let two workers wait on each other's partitions forever.
///
/// A scheduler is not thread-safe; the communicator serialises calls. It is built from the
/// `Config`, or, when it has such a constructor, from the `Config` and what a partition of the
/// partitioner the communicator uses is worth (`credit_unit_of`: its `credit_unit()`, else its
/// `bound()`, the largest `send_task::bytes` it will see): a credit counted in partitions needs
/// it, and a scheduler must not guess which partitioner runs.
/// `make_scheduler` builds one as the communicator does. Implement one as a small class and
/// `static_assert(bps::Scheduler<S>)`.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "byteps/core/config.hpp"

namespace bps {

struct send_task {
  std::uint64_t key = 0;     ///< tensor key
  std::uint32_t part = 0;    ///< partition index within the tensor
  int priority = 0;          ///< higher goes first, where the scheduler orders by it
  std::uint64_t order = 0;   ///< push_pull call number: earlier calls first among equals
  std::size_t bytes = 0;     ///< partition size
  void* context = nullptr;   ///< the communicator's, passed back untouched
};

template <class S>
concept Scheduler = (std::constructible_from<S, const Config&> ||
                     std::constructible_from<S, const Config&, std::size_t>) &&
                    requires(S& s, const S& cs, send_task t, std::size_t bytes) {
                      s.push(t);
                      { s.pop() } -> std::same_as<std::optional<send_task>>;
                      s.sent(bytes);
                      { cs.queued() } -> std::convertible_to<std::size_t>;
                      { cs.in_flight_bytes() } -> std::convertible_to<std::size_t>;
                    };

/// A scheduler built for a partitioner whose partitions are worth `partition_bytes` to a credit
/// (`credit_unit_of` the partitioner): given that when `S` takes it, else from the `Config` alone.
template <Scheduler S>
S make_scheduler(const Config& cfg, std::size_t partition_bytes) {
  if constexpr (std::constructible_from<S, const Config&, std::size_t>)
    return S(cfg, partition_bytes);
  else
    return S(cfg);
}

}  // namespace bps
