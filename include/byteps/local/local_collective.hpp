#pragma once
/// @file
/// The `bps::LocalCollective` concept: what the processes of one machine do together before
/// and after the machine talks to the servers (BytePS's local reduce and local broadcast).
///
/// A push_pull is one pipeline of named stages (`bps::stage`), run by the worker's engine
/// (`worker/local_stage.hpp`) partition by partition:
///
///     reduce_scatter -> local_reduce -> push/pull of the owned partitions -> local_gather
///       -> all_gather
///
/// A local collective supplies only its local steps. `reduce_scatter` brings every local rank's
/// contribution in and says where in host memory this rank's owned elements go
/// (`work::owned`); a policy with `PartitionedSteps` then sums each owned partition over the
/// machine's local ranks (`reduce_part`), which the engine pushes and pulls in place at once,
/// and copies each partition's sum into the caller's buffer as soon as it is back
/// (`gather_part`); `all_gather` ends the operation. A policy without them sums the whole
/// owned run in `reduce_scatter` and brings every rank's summed slices back in `all_gather`. A
/// GPU policy does its copies to and from host memory inside its steps. The network I/O of a
/// machine is so spread over its local ranks.
///
/// Slices are cut the same way on every machine, whatever its local size: a tensor has
/// `cluster::slices` slices (the largest local size in the job), and slice s of a tensor named
/// N is pushed under the name `slice_name(N, s)`, so its key is the same everywhere. A machine
/// with fewer local ranks gives each of them a contiguous run of slices (`owned_slices`).
///
/// With one process per machine (`bps::local::none`) there is no local stage: `is_identity`
/// is true, the policy needs none of the steps, and the worker sends the caller's buffer
/// directly.
///
/// @par Contract for the steps (`LocalSteps`)
/// - `attach` is called once, after the worker joined the cluster, before any operation.
/// - `begin` runs on the caller's thread when an operation is submitted (checks of the buffer,
///   events on the caller's stream); it throws `usage_error` for misuse.
/// - `reduce_scatter`, `all_gather` and `progress` run on the engine's one stage thread and
///   never block: they return `step_status::waiting` when they wait for the other local ranks
///   or the device, and whoever changes what they wait for rings the machine's doorbell
///   (`bell_word`), on which the engine sleeps. The policy keeps no table of operations, no
///   deadline and no failure state of its own: its per-tensor and per-operation state live in
///   the engine's records (`tensor_state`, `step_state`).
/// - A step throws `communicator_error` when the machine's local ranks cannot go on together
///   (the engine then declares the communicator dead and calls `abort`), and any other
///   exception when only this operation failed (the engine fails it, and refuses the tensor
///   afterwards since its local ranks may no longer agree on its rounds).
/// - `waiting_for` says what an operation past its deadline still waits for.
/// - `abandon` is called for each operation that fails before its steps are done (the engine
///   has let go of it afterwards): it tells the other local ranks, where they would otherwise
///   wait for it until their deadline, and forgets what the policy kept of it.
/// - `shutdown()` frees what the policy holds (shared memory included); it is idempotent.

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/core.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/core/push_pull_options.hpp"
#include "byteps/core/stage.hpp"

namespace bps::local {

/// What a local collective learns when its worker has joined the cluster.
struct cluster {
  int machine = 0;         ///< this machine's index (DMLC_WORKER_ID)
  int machines = 1;        ///< DMLC_NUM_WORKER
  int global_rank = 0;     ///< this process among all worker processes
  int global_size = 1;     ///< worker processes in the job
  int slices = 1;          ///< slices per tensor: the largest local size in the job
  std::uint64_t job_id = 0;  ///< random per job; names shared-memory segments
};

/// A shared-memory segment as every process of the machine may map it: its name and this
/// process's mapping of it, from offset 0.
struct named_memory {
  std::string name;
  std::span<std::byte> mapping;
};

/// One partition of a tensor as the pipeline moves it: elements [first, last) of the tensor,
/// which lie in slice `slice` and go to the servers as partition `index` of that slice's key
/// `key` (`tensor_key(slice_name(name, slice))`). A tensor's partitions are the same on every
/// local rank and every machine: the engine cuts each slice with the Partitioner.
struct part {
  std::size_t first = 0, last = 0;
  int slice = 0;
  std::uint32_t index = 0;
  std::uint64_t key = 0;
};

/// One push_pull (or broadcast) as the local steps see it. The worker's engine owns it, with the
/// operation's record (`state`), for the whole life of the operation.
struct work {
  std::string name;        ///< the tensor's name; slices are pushed as `slice_name(name, s)`
  std::string what;        ///< "push_pull of 'name'", for messages
  std::uint64_t key = 0;   ///< `tensor_key(name)`
  void* data = nullptr;    ///< the caller's buffer
  std::size_t count = 0;
  dtype type = dtype::float32;
  push_pull_options opts;
  /// False for a broadcast's non-roots: their data counts as zeros (-0.0), whatever it holds.
  bool contributes = true;
  /// False for a broadcast on a machine without its root: every push of it holds only zeros
  /// (the network stage flags them, `detail::op_state::holds_no_data`).
  bool machine_contributes = true;
  std::uint64_t round = 0;  ///< operations on this tensor before this one
  std::chrono::steady_clock::time_point deadline;  ///< BYTEPS_OP_TIMEOUT_MS after the call
  /// Every partition of the whole tensor, slice by slice (the engine's plan, fixed at the
  /// tensor's first use). A local rank's own partitions, those of its `owned_slices`, are one
  /// contiguous run of them.
  std::span<const part> parts;
  std::shared_ptr<detail::op_state> state;          ///< what the caller's handle waits on
  /// Host memory for this rank's owned elements (`owned_range`), set by `reduce_scatter`: it
  /// holds their sum over the machine once reduced (with `PartitionedSteps`, partition by
  /// partition), the engine pushes and pulls the owned partitions in place there, and the
  /// gather spreads the result.
  std::byte* owned = nullptr;
  /// The segment `owned` lies in, set by the tensor's first `reduce_scatter` when the policy
  /// keeps the segment's name for the whole job (`local::host::share_segments`); empty
  /// otherwise (later operations use the same segment). The engine shares
  /// it with a transport that can let a colocated server read the owned slices where they lie
  /// (`transport::ipc::share_memory`), instead of copying them into its ring.
  named_memory owned_segment;
  /// Why the operation failed so far (this rank's slices at the servers, or another local
  /// rank), or null. `all_gather` still runs after a network failure so that the other local
  /// ranks learn of it; the engine fails the operation with this error once the steps are done.
  std::exception_ptr error;
};

/// What a local step did on one call.
enum class step_status {
  waiting,  ///< nothing to do until the doorbell rings (other local ranks, the device)
  moved,    ///< it got further; call it again
  done,     ///< the step is complete
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

/// The local steps of a real local collective (one that is not `is_identity`); see the
/// contract at the top of this file.
template <class L>
concept LocalSteps =
    std::default_initializable<typename L::tensor_state> &&
    std::default_initializable<typename L::step_state> &&
    requires(L& l, const L& cl, local::work& w, const local::work& cw,
             typename L::tensor_state& t, const typename L::tensor_state& ct,
             typename L::step_state& s, const typename L::step_state& cs,
             const std::string& why) {
      l.begin(w, s);
      { l.reduce_scatter(w, t, s) } -> std::same_as<local::step_status>;
      { l.all_gather(w, t, s) } -> std::same_as<local::step_status>;
      { l.progress() } -> std::same_as<bool>;
      { cl.waiting_for(cw, ct, cs) } -> std::convertible_to<std::string>;
      { l.bell_word() } -> std::same_as<std::atomic<std::uint32_t>*>;
      l.abort(why);
      l.abandon(w, t, s);
    };

namespace local {
/// How long the local stage keeps polling a policy's steps, after the last progress and while
/// an operation is in a local step, before it sleeps on the doorbell: `L::poll_window()` where
/// the policy has one (device work completes sooner than a host function can ring the bell),
/// else zero (sleep at once).
template <class L>
std::chrono::nanoseconds poll_window_of(const L& l) {
  if constexpr (requires { { l.poll_window() } -> std::convertible_to<std::chrono::nanoseconds>; })
    return l.poll_window();
  else
    return std::chrono::nanoseconds(0);
}
}  // namespace local

namespace local {
/// What a policy's per-partition steps are, for the timeline, and which partitions it gathers
/// one by one.
struct partition_steps {
  stage in = stage::local_reduce;   ///< what `reduce_part` does
  stage out = stage::local_gather;  ///< what `gather_part` does
  /// `gather_part` for every partition of the tensor (`local::host`: each local rank copies
  /// each sum out of shared memory), or only for the owned ones (`local::nccl`: the others
  /// reach the device in `all_gather`, as one NCCL broadcast).
  bool every_partition = true;
  /// `reduce_scatter` and `all_gather` do a `local_reduce` and a `local_gather` of the whole
  /// tensor of their own (NCCL's), for the timeline.
  bool whole_steps = false;
};
}  // namespace local

/// A local collective whose steps go partition by partition: after `reduce_scatter` (every
/// local rank's contribution in, and the work on the whole tensor, if any, started), the engine
/// calls `reduce_part` for the next partition this rank owns until it returns true (the
/// partition's sum is in host memory at `work::owned`) and pushes it at once; it calls
/// `part_back` when an owned partition's sum is back, and `gather_part` for each partition
/// (every one, or the owned ones: `L::partitioned.every_partition`) until it returns true (the
/// sum is in this rank's buffer), while later partitions are still on the network.
/// `all_gather` then ends the operation. `i` is the partition's position in `work::parts`; the
/// calls never block (a `false` waits for the doorbell, as a step's `waiting`).
template <class L>
concept PartitionedSteps =
    LocalSteps<L> &&
    requires(L& l, local::work& w, typename L::tensor_state& t, std::size_t i) {
      { l.reduce_part(w, t, i) } -> std::same_as<bool>;
      l.part_back(w, t, i);
      { l.gather_part(w, t, i) } -> std::same_as<bool>;
      { L::partitioned } -> std::convertible_to<local::partition_steps>;
    };

template <class L>
concept LocalCollective =
    std::constructible_from<L, const Config&> &&
    requires(L& l, const L& cl, const local::cluster& c) {
      { L::is_identity } -> std::convertible_to<bool>;
      { cl.local_rank() } -> std::convertible_to<int>;
      { cl.local_size() } -> std::convertible_to<int>;
      l.attach(c);
      l.shutdown();
    } && (L::is_identity || LocalSteps<L>);

}  // namespace bps
