#pragma once
/// @file
/// The `bps::LocalCollective` concept: what the processes of one machine do together before
/// and after the machine talks to the servers (BytePS's local reduce and local broadcast).
///
/// A push_pull is one pipeline of named stages, run by the worker's engine
/// (`worker/local_stage.hpp`):
///
///     reduce_scatter -> push/pull of the owned slices -> all_gather
///
/// A local collective supplies only its two local steps. `reduce_scatter` sums the tensor over
/// the machine's local ranks so that each local rank holds, in host memory, the machine's sum of
/// the slices it owns (`work::owned`); the engine push_pulls those slices through the servers
/// in place; `all_gather` brings every rank's summed slices back into every rank's buffer. A
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

#include <fmt/format.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/core/push_pull_options.hpp"

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
  std::uint64_t round = 0;  ///< operations on this tensor before this one
  std::chrono::steady_clock::time_point deadline;  ///< BYTEPS_OP_TIMEOUT_MS after the call
  std::shared_ptr<detail::op_state> state;          ///< what the caller's handle waits on
  /// Host memory holding this rank's owned elements (`owned_range`) summed over the machine,
  /// set by `reduce_scatter`; the engine push_pulls the owned slices in place, and
  /// `all_gather` spreads the result.
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
