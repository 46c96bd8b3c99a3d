#pragma once
/// @file
/// The `bps::Partitioner` concept: how a tensor is cut into partitions, the unit that travels
/// to one server and is summed there. Smaller partitions pipeline better and spread a tensor
/// over more servers; larger ones cost fewer frames.
///
/// A partitioner is built from the `Config`; `split(bytes, element_size)` returns contiguous
/// partitions covering the tensor in order, each a whole number of elements and at most
/// `bound()` bytes (which bounds the frames a server accepts). Every worker must split the same
/// tensor the same way: a partitioner must be a pure function of its Config and its arguments.
///
/// Optional: `credit_unit()`, the partition size the scheduler's credit
/// (BYTEPS_SCHEDULING_CREDIT) counts in, where the partitions a partitioner usually makes are
/// smaller than its `bound()`; without it the credit counts in `bound()`s (`credit_unit_of`).
///
/// Optional: `fit(const job_shape&)`, what the scheduler's welcome says about the job, which
/// every worker hears alike; a worker calls it once, before its first split (`fit_to_job`).

#include <concepts>
#include <cstddef>
#include <vector>

#include "byteps/core/config.hpp"

namespace bps {

struct partition_range {
  std::size_t offset = 0;  ///< bytes from the tensor's start
  std::size_t bytes = 0;
  friend bool operator==(const partition_range&, const partition_range&) = default;
};

template <class P>
concept Partitioner = std::constructible_from<P, const Config&> &&
                      requires(const P& p, std::size_t bytes, std::size_t element_size) {
                        { p.split(bytes, element_size) } -> std::same_as<std::vector<partition_range>>;
                        { p.bound() } -> std::convertible_to<std::size_t>;
                      };

/// What the scheduler's welcome says about the job to every worker alike, beyond the Config
/// (whose counts of machines and servers every node already shares).
struct job_shape {
  /// Every worker and server on one host, moving payloads through shared memory: no payload
  /// crosses a socket.
  bool in_shared_memory = false;
};

/// Tells `p` the job's shape, where it has `fit`; a partitioner without it ignores the shape.
template <Partitioner P>
void fit_to_job(P& p, const job_shape& shape) {
  if constexpr (requires { p.fit(shape); }) p.fit(shape);
}

/// The partition size `p`'s scheduling credit counts in: its `credit_unit()`, else its `bound()`.
template <Partitioner P>
std::size_t credit_unit_of(const P& p) {
  if constexpr (requires { { p.credit_unit() } -> std::convertible_to<std::size_t>; })
    return p.credit_unit();
  else
    return p.bound();
}

}  // namespace bps
