#pragma once
/// @file
/// The `bps::LocalCollective` concept: what the processes of one machine do together before
/// and after the machine talks to the servers (BytePS's local reduce and local broadcast).
///
/// A local collective owns the whole of a push_pull on its machine: it sums the tensor over the
/// machine's local ranks so that each local rank holds the machine's sum of some slices
/// (reduce-scatter), has each local rank push_pull its own slices through the servers (the
/// `local::network` the communicator hands it), and brings the summed slices back to every local
/// rank (all-gather). The network I/O of a machine is so spread over its local ranks.
///
/// Slices are cut the same way on every machine, whatever its local size: a tensor has
/// `cluster::slices` slices (the largest local size in the job), and slice s of a tensor named
/// N is pushed under the name `slice_name(N, s)`, so its key is the same everywhere. A machine
/// with fewer local ranks gives each of them a contiguous run of slices (`owned_slices`).
///
/// With one process per machine (`bps::local::none`) there is no local stage:
/// `is_identity` is true and the communicator sends the caller's buffer directly.
///
/// @par Contract for implementations
/// - `attach` is called once, after the communicator joined the cluster, before any push_pull.
/// - `push_pull` returns at once; the returned handle completes when the sum is in the caller's
///   buffer, and fails with `communicator_error` when the communicator dies (`fail`) or a local
///   rank does not come within the request's deadline.
/// - `fail(why)` may be called with the communicator's lock held: it must not call back into the
///   `network`.
/// - `shutdown()` fails what is in flight and frees what the policy holds (shared memory
///   included); it is idempotent.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/push_pull_options.hpp"

namespace bps::local {

/// What a local collective learns when its communicator has joined the cluster.
struct cluster {
  int machine = 0;         ///< this machine's index (DMLC_WORKER_ID)
  int machines = 1;        ///< DMLC_NUM_WORKER
  int global_rank = 0;     ///< this process among all worker processes
  int global_size = 1;     ///< worker processes in the job
  int slices = 1;          ///< slices per tensor: the largest local size in the job
  std::uint64_t job_id = 0;  ///< random per job; names shared-memory segments
};

/// One push_pull (or broadcast) handed to the local collective.
struct request {
  std::string name;  ///< the tensor's name; slices are pushed as `slice_name(name, s)`
  std::string what;  ///< "push_pull of 'name'", for messages
  void* data = nullptr;
  std::size_t count = 0;
  dtype type = dtype::float32;
  push_pull_options opts;
  /// False for a broadcast's non-roots: their data counts as zeros (-0.0), whatever it holds.
  bool contributes = true;
  std::chrono::steady_clock::time_point deadline;  ///< BYTEPS_OP_TIMEOUT_MS after the call
};

/// How a local collective reaches the servers; the communicator implements it.
class network {
 public:
  virtual ~network() = default;
  /// Starts the servers' push_pull of `count` elements of host memory at `data` under `name`.
  /// `opts.average` divides by the number of worker processes in the job.
  virtual handle push_pull(std::string name, std::string what, void* data, std::size_t count,
                           dtype type, push_pull_options opts) = 0;
  /// Declares the communicator dead (for example: a local rank never came).
  virtual void fail(const std::string& why) = 0;
};

/// A tensor as a local collective remembers it between calls: the shape of its first use and
/// whether an operation on it is in flight. `admit` takes the shape on first use and refuses a
/// later call with another shape, or one while the previous is in flight (`usage_error`).
struct tensor_use {
  std::size_t count = 0;
  dtype type = dtype::float32;
  bool busy = false;

  void admit(const request& r, bool fresh) {
    if (fresh) {
      count = r.count;
      type = r.type;
      return;
    }
    if (count != r.count || type != r.type)
      throw usage_error(fmt::format("{}: the tensor was first used as {} x {}; this call passes "
                                    "{} x {}",
                                    r.what, count, dtype_name(type), r.count,
                                    dtype_name(r.type)));
    if (busy)
      throw usage_error(fmt::format("{}: the previous operation on this tensor is still in "
                                    "flight; wait on its handle first",
                                    r.what));
  }
};

/// The name slice `s` of tensor `name` is pushed under (its key hashes from this name).
inline std::string slice_name(std::string_view name, int s) {
  return fmt::format("{}#slice{}", name, s);
}

/// Elements [first, second) of a `count`-element tensor that slice `s` of `slices` covers.
inline std::pair<std::size_t, std::size_t> slice_range(std::size_t count, int s, int slices) {
  const auto n = static_cast<std::size_t>(slices);
  const auto i = static_cast<std::size_t>(s);
  return {count * i / n, count * (i + 1) / n};
}

/// Slices [first, second) that local rank `local_rank` of a machine with `local_size` ranks
/// reduces and push_pulls: contiguous runs that together cover every slice once.
inline std::pair<int, int> owned_slices(int local_rank, int local_size, int slices) {
  return {local_rank * slices / local_size, (local_rank + 1) * slices / local_size};
}

/// Elements [first, second) of a `count`-element tensor that local rank `local_rank` owns: the
/// union of its `owned_slices`, which is contiguous.
inline std::pair<std::size_t, std::size_t> owned_range(std::size_t count, int local_rank,
                                                       int local_size, int slices) {
  const auto [first, last] = owned_slices(local_rank, local_size, slices);
  return {slice_range(count, first, slices).first, slice_range(count, last, slices).first};
}

}  // namespace bps::local

namespace bps {

template <class L>
concept LocalCollective =
    std::constructible_from<L, const Config&> &&
    requires(L& l, const L& cl, const local::cluster& c, local::network& net,
             local::request req, const std::string& why) {
      { L::is_identity } -> std::convertible_to<bool>;
      { cl.local_rank() } -> std::convertible_to<int>;
      { cl.local_size() } -> std::convertible_to<int>;
      l.attach(c, net);
      { l.push_pull(std::move(req)) } -> std::same_as<handle>;
      l.fail(why);
      l.shutdown();
    };

}  // namespace bps
