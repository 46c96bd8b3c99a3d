#pragma once
/// @file
/// The records of the local stage (worker/local_stage.hpp): `local_tensors<L>`, the table of
/// tensors it remembers between operations (the shape of their first use and its partitions,
/// whether one is in flight, whether one failed midway, their round and the policy's per-tensor
/// state), and `local_operation<L>`, what the local stage keeps of one operation as it moves
/// through the stages (the operation's record itself is its `op_state`, `work::state`).
///
/// @par Thread Safety
/// None of its own: the local stage guards the table and the fields marked so with its mutex;
/// the rest belongs to its stage thread.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/core.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/worker/stats.hpp"

namespace bps::worker {

/// One tensor as the local stage remembers it between operations.
template <LocalSteps L>
struct local_tensor {
  std::size_t count = 0;  // shape of the first use; these three guarded by the stage's mutex
  dtype type = dtype::float32;
  bool busy = false;
  std::string broken;              // why an operation failed midway: its local ranks may disagree
  std::uint64_t round = 0;         // written by the stage thread while busy
  typename L::tensor_state local;  // stage thread only
  /// The whole tensor's partitions (`work::parts`), and this rank's run of them,
  /// [owned_first, owned_last): fixed at the first use.
  std::vector<local::part> plan;
  std::size_t owned_first = 0, owned_last = 0;
};

template <LocalSteps L>
class local_tensors {
 public:
  /// The tensor that `w` runs on, remembered from its first use. Throws `usage_error` when
  /// `w`'s shape differs from that use, when an operation on the tensor is still in flight, or
  /// when one failed midway before.
  local_tensor<L>& admit(const local::work& w) {
    auto [it, fresh] = tensors_.try_emplace(w.name);
    local_tensor<L>& t = it->second;
    if (fresh) {
      t.count = w.count;
      t.type = w.type;
      return t;
    }
    if (t.count != w.count || t.type != w.type)
      throw usage_error(
          fmt::format("{}: the tensor was first used as {} x {}; this call passes "
                      "{} x {}",
                      w.what, t.count, dtype_name(t.type), w.count, dtype_name(w.type)));
    if (t.busy)
      throw usage_error(
          fmt::format("{}: the previous operation on this tensor is still in "
                      "flight; wait on its handle first",
                      w.what));
    if (!t.broken.empty())
      throw usage_error(w.what + ": this tensor failed before (" + t.broken +
                        "); its local ranks no longer agree on its rounds");
    return t;
  }

  /// Lets go of every tensor's state (its shared memory), before the policy shuts down.
  void clear() { tensors_.clear(); }

 private:
  std::unordered_map<std::string, local_tensor<L>> tensors_;  // node-based: operations point in
};

/// What the network stage tells the local stage of one operation, from the links' I/O threads
/// (`op_state::next`): which partitions' sums are in, and when it let go of the memory.
struct network_progress {
  explicit network_progress(std::size_t parts) : answered(parts) {}
  std::vector<std::atomic<std::uint8_t>> answered;  ///< by position in the plan
  std::exception_ptr error;                         ///< written before `done`
  std::atomic<bool> done{false};
};

/// Where an operation of the local stage is: in the policy's whole-tensor `stage::local_reduce`
/// step (`L::reduce_scatter`: every local rank's contribution in), its partitions in the
/// pipeline, each in a stage of its own (reduced, on the network, gathered), or in the whole-
/// tensor `stage::local_gather` step (`L::all_gather`: the end).
enum class local_phase { local_reduce, per_partition, local_gather };

/// What the local stage keeps of one operation.
template <LocalSteps L>
struct local_operation {
  local::work w;
  typename L::step_state step;
  local_tensor<L>* t = nullptr;
  local_phase at = local_phase::local_reduce;
  std::shared_ptr<network_progress> net;  ///< set when the network stage opened
  std::size_t next_reduce = 0;            ///< the next owned partition to reduce and release
  std::vector<std::int64_t> back;  ///< by plan position: an owned sum handed back (when; odd)
  std::size_t backs = 0;
  std::vector<std::uint8_t> gathered;     ///< by plan position
  std::size_t gathered_count = 0;
  /// Why a gather failed (another local rank failed on the tensor): the operation fails with
  /// it once its network stage is done.
  std::exception_ptr gather_error;
  /// When the current step began (or the last partition was reduced), `detail::steady_ns()`.
  std::int64_t step_began_ns = 0;
  /// Its local steps' times so far, for `comm.stats()` once it succeeds.
  stage_times times;
};

}  // namespace bps::worker
