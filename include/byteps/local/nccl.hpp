#pragma once
/// @file
/// `bps::local::nccl`: the GPUs of one machine, one process per GPU (BYTEPS_LOCAL_RANK of
/// BYTEPS_LOCAL_SIZE), exchange device buffers as BytePS does:
///
///   1. reduce-scatter among the machine's GPUs (NCCL), so that local rank l holds the
///      machine's sum of the slices it owns (`owned_slices`): `local_reduce`;
///   2. copy of each owned partition to pinned host memory, each with its event: `copy_out`;
///   3. push and pull of each owned partition as soon as its copy is done (the worker's network
///      stage);
///   4. copy of each partition's sum back into the device buffer as soon as it is in:
///      `copy_in`;
///   5. all-gather among the machine's GPUs (NCCL), so that every GPU holds the whole sum:
///      `local_gather`.
///
/// Step 1 is this policy's `reduce_scatter` (it queues step 2 behind it), `reduce_part` sees a
/// partition's copy out done, `part_back` queues its copy in and `gather_part` sees it done,
/// and step 5 is `all_gather` (`PartitionedSteps`, local_collective.hpp); the worker's engine
/// runs them on its stage thread, so partition 0 is on the network while partition 1 is
/// copied. The device itself
/// lives in `nccl_device` (nccl_device.hpp), the CUDA and NCCL helpers in cuda_helpers.hpp, and
/// what a local rank announces and issues in the machine's order in impl/nccl_order.hpp.
///
/// The handle completes when the result is in the caller's device buffer, and carries a CUDA
/// event (`handle::device_event()`) so that the trainer's stream can wait for the result
/// instead of its host thread.
///
/// **Uneven slices.** `ncclReduceScatter` and `ncclAllGather` need equal counts per rank, but
/// slices are cut the same on every machine (`cluster::slices`, the largest local size in the
/// job) and a tensor's count need not divide evenly. Instead of padding (a second device
/// buffer per tensor and two extra copies), step 1 is one `ncclReduce` per local rank, rooted
/// at the owner of each contiguous run, and step 5 one `ncclBroadcast` per local rank, each set
/// fused in one `ncclGroupStart`/`ncclGroupEnd` so that NCCL runs them as one operation. Both
/// are in place in the caller's buffer, which the result overwrites anyway.
///
/// **Order.** NCCL needs every local rank to issue the same collectives in the same order, while
/// each trainer calls push_pull in its own order. Local rank 0 decides, as in BytePS: see
/// `order_board` (shared memory, the segment `segment_name(job_id, machine, "nccl")`, which
/// also carries the `ncclUniqueId`).
///
/// **Never blocking the caller, every wait bounded.** `begin` (on the caller's thread) only
/// checks the buffer and records a CUDA event on the caller's stream
/// (`push_pull_options::stream`). The steps issue the device work on the stage stream (after
/// that event); the worker's stage thread sleeps on the machine's futex doorbell, which is rung
/// by the other local ranks, by the network's answers, and by the device itself (a host
/// function queued after each step; the per-partition copies back are polled instead, see
/// `part_back`). The NCCL communicator is non-blocking (`ncclConfig_t::blocking =
/// 0`): initialisation and each fused group are polled with `ncclCommGetAsyncError` until
/// the operation's deadline. When a local rank fails (its deadline passes, a CUDA or NCCL call
/// fails, its communicator dies) it records the failure on the board; every local rank then
/// aborts its NCCL communicator (`ncclCommAbort`, which also ends kernels waiting on a peer),
/// fails what is in flight with `communicator_error`, and declares its communicator dead.
///
/// **Memory.** Each tensor holds pinned host memory for the slices its local rank owns (about
/// count / local_size elements), allocated at first use and freed at shutdown.
///
/// Needs the CUDA runtime and NCCL headers and libraries: link `byteps::cuda`
/// (`find_package(byteps CONFIG COMPONENTS cuda)`). Run on one H200 with one GPU process per
/// machine; several GPUs per machine have not run: see docs/architecture.md ("GPU (NCCL) local
/// stage") for what has and has not run.
///
/// @par Thread Safety
/// `begin` runs on callers' threads; every other step on the worker's one stage thread.

#if !__has_include(<cuda_runtime_api.h>) || !__has_include(<nccl.h>)
#error "byteps/local/nccl.hpp needs the CUDA runtime and NCCL headers: link byteps::cuda (CMake: find_package(byteps CONFIG COMPONENTS cuda)), or configure byteps with -DBYTEPS_WITH_CUDA=ON"
#endif

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/local/cuda_helpers.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/local/nccl_device.hpp"
#include "byteps/local/order_board.hpp"

namespace bps::local {

class nccl {
 public:
  static constexpr bool is_identity = false;
  using clock = std::chrono::steady_clock;

  explicit nccl(const Config& cfg)
      : local_rank_(cfg.local_rank),
        local_size_(cfg.local_size),
        attach_timeout_(cfg.rendezvous_timeout),
        log_(cfg.log, "nccl") {}
  nccl(const nccl&) = delete;
  nccl& operator=(const nccl&) = delete;
  ~nccl() { shutdown(); }

  int local_rank() const noexcept { return local_rank_; }
  int local_size() const noexcept { return local_size_; }
  /// The CUDA device this local rank uses (valid after `attach`).
  int device() const noexcept { return device_.device(); }
  /// The local stage polls the device's events this long after the last progress before it
  /// sleeps on the doorbell (which a host function queued after each step rings later), and
  /// polls for the copies back, for which nothing rings.
  std::chrono::nanoseconds poll_window() const noexcept { return std::chrono::microseconds(200); }

  /// Picks the device, meets the machine's other local ranks on the order board, and creates
  /// the NCCL communicator of the machine (bounded by BYTEPS_RENDEZVOUS_TIMEOUT_MS).
  void attach(const cluster& c) {
    cluster_ = c;
    what_ = fmt::format("bps::local::nccl (machine {} local rank {} of {})", c.machine,
                        local_rank_, local_size_);
    log_.rename(fmt::format("worker {}.{} nccl", c.machine, local_rank_));
    device_.attach(c, what_, clock::now() + attach_timeout_, attach_timeout_);
    attached_.store(true, std::memory_order_release);
  }

  /// The tensor's pinned host memory for the slices this rank owns, and by owned partition
  /// the events recorded once its copy out and its copy in ran.
  struct tensor_state {
    bool open = false;
    std::vector<std::pair<std::size_t, std::size_t>> owners;  // elements of each local rank
    nccl_detail::pinned* host = nullptr;                       // owned by the policy
    std::size_t owned_first = 0;  // the first owned partition's position in `work::parts`
    std::vector<std::shared_ptr<void>> copied_out, copied_in;  // by owned partition
  };
  /// Where an operation is (the waits are for local rank 0's order on the board, or the
  /// device), the event on the caller's stream, and the gather's entry flags.
  struct step_state {
    enum class stage { start, wait_reduce, reducing, network, wait_gather, gathering };
    stage at = stage::start;
    std::shared_ptr<void> ready;  // recorded on the caller's stream by begin
    std::uint32_t flags = 0;      // some local rank's slices failed (entry_failed)
  };

  std::atomic<std::uint32_t>* bell_word() { return device_.board().bell_word(); }

  static constexpr partition_steps partitioned{
      .in = stage::copy_out, .out = stage::copy_in, .every_partition = false, .whole_steps = true};

  /// Caller's thread: checks the buffer, records the caller's stream, makes the event the
  /// handle exposes (an empty tensor's is the caller's stream as it is now).
  void begin(work& w, step_state& s) {
    if (!attached_.load(std::memory_order_acquire))
      throw usage_error(w.what + ": bps::local::nccl was not attached (the communicator "
                                 "attaches it when it joins the cluster), or was shut down");
    if (w.count != 0) device_.check_buffer(w.data, w.what);
    nccl_detail::device_guard on(device_.device(), w.what);
    s.ready = nccl_detail::make_event(w.what);
    nccl_detail::cuda_check<usage_error>(
        cudaEventRecord(nccl_detail::event_of(s.ready), static_cast<cudaStream_t>(w.opts.stream)),
        "cudaEventRecord on the stream of push_pull_options::stream (is it a stream of "
        "device " + std::to_string(device_.device()) + "?)",
        w.what);
    w.state->device_event = w.count == 0 ? s.ready : nccl_detail::make_event(w.what);
    if (w.count == 0) w.state->device_event_recorded();
  }

  step_status reduce_scatter(work& w, tensor_state& t, step_state& s) {
    using stage = step_state::stage;
    device_.use_on_this_thread(what_);
    switch (s.at) {
      case stage::start:
        if (!t.open) open(t, w);
        post(w, t, s, order_phase::reduce, 0);
        s.at = stage::wait_reduce;
        return step_status::moved;
      case stage::reducing:  // the copies out are queued: `reduce_part` sees each done
        w.owned = t.host->data();
        s.at = stage::network;
        return step_status::done;
      default:
        return step_status::waiting;  // for local rank 0's order (progress issues it)
    }
  }

  /// Owned partition `i` is in host memory once its copy out ran (queued by the reduce).
  bool reduce_part(work& w, tensor_state& t, std::size_t i) {
    return copied(t.copied_out[i - t.owned_first], "the device's copy to host", w);
  }

  /// Owned partition `i`'s sum is in host memory: its copy into the device buffer is queued.
  void part_back(work& w, tensor_state& t, std::size_t i) {
    device_.use_on_this_thread(what_);
    const auto esize = dtype_size(w.type);
    const part& p = w.parts[i];
    const std::size_t at = p.first - t.owners[static_cast<std::size_t>(local_rank_)].first;
    nccl_detail::cuda_check(
        cudaMemcpyAsync(static_cast<std::byte*>(w.data) + p.first * esize,
                        t.host->data() + at * esize, (p.last - p.first) * esize,
                        cudaMemcpyHostToDevice, device_.stream()),
        "cudaMemcpyAsync of a partition's sum to the device", w.what);
    // No host function to ring the bell: each would hold the stream, once per partition
    // (docs/performance.md, "One GPU, one worker process (`local::nccl`), device against host
    // buffers"). The stage thread polls while a copy in is pending (`awaits_copy_in`).
    nccl_detail::cuda_check(
        cudaEventRecord(nccl_detail::event_of(t.copied_in[i - t.owned_first]), device_.stream()),
        "cudaEventRecord", w.what);
  }

  /// Owned partition `i`'s sum is in the device buffer once its copy in ran.
  bool gather_part(work& w, tensor_state& t, std::size_t i) {
    return copied(t.copied_in[i - t.owned_first], "the device's copy from host", w);
  }

  step_status all_gather(work& w, tensor_state& t, step_state& s) {
    using stage = step_state::stage;
    switch (s.at) {
      case stage::network: {
        post(w, t, s, order_phase::gather, w.error ? entry_failed : 0u);
        s.at = stage::wait_gather;
        return step_status::moved;
      }
      case stage::gathering: {
        const cudaError_t e = cudaEventQuery(nccl_detail::event_of(w.state->device_event));
        if (e == cudaErrorNotReady) return step_status::waiting;
        nccl_detail::cuda_check(e, "the device's all-gather (cudaEventQuery)", w.what);
        if (!w.error && (s.flags & entry_failed))
          w.error = std::make_exception_ptr(usage_error(fmt::format(
              "{}: another local rank of machine {} failed on this tensor (its log says why); "
              "this buffer does not hold the sum",
              w.what, cluster_.machine)));
        return step_status::done;
      }
      default:
        return step_status::waiting;
    }
  }

  /// The machine-wide part of a pass: announces what this rank is ready for, lets local rank
  /// 0 order the announcements, and issues what it ordered.
  bool progress() {
    device_.use_on_this_thread(what_);
    order_board& board = device_.board();
    if (auto why = board.poisoned()) throw communicator_error(*why);
    bool progressed = false;
    while (!outbox_.empty() && board.announce(outbox_.front())) {
      outbox_.pop_front();
      progressed = true;
    }
    if (local_rank_ == 0 && board.coordinate([&](std::uint64_t key) { return name_of(key); }))
      progressed = true;
    while (auto e = board.next()) {
      issue(*e);
      board.issued();
      board.bell().ring();
      progressed = true;
    }
    return progressed;
  }

  std::string waiting_for(const work&, const tensor_state&, const step_state& s) const {
    using stage = step_state::stage;
    switch (s.at) {
      case stage::wait_reduce:
        return fmt::format("still waiting for the other local ranks of machine {} to call it "
                           "(local rank 0 orders the reduce once all {} did)",
                           cluster_.machine, local_size_);
      case stage::wait_gather:
        return fmt::format("still waiting for the other local ranks of machine {} to get their "
                           "slices back from the servers",
                           cluster_.machine);
      case stage::reducing:
      case stage::network:
        return "still waiting for the device to finish the reduce and the copies to host (is "
               "the caller's stream stuck, or a local rank's GPU?)";
      case stage::gathering:
        return "still waiting for the device to finish the copy back and the all-gather";
      default:
        return "still waiting for this local rank's stage thread";
    }
  }

  /// The communicator died: every local rank of the machine aborts its collective.
  void abort(const std::string& why) noexcept {
    try {
      awaiting_.clear();
      outbox_.clear();
      device_.abort(why);
    } catch (const std::exception& e) {
      log_.error("{}: while failing ({}): {}", what_, why, e.what());
    }
  }

  /// A failed operation: forget it, so that an order for it is refused rather than issued on
  /// a record the engine let go of. (The board's poisoning tells the other local ranks.)
  void abandon(work& w, tensor_state&, step_state&) noexcept {
    if (auto it = awaiting_.find(w.key); it != awaiting_.end() && it->second.w == &w)
      awaiting_.erase(it);
  }

  /// After the worker's stage thread ended: the device resources go, on the caller's thread.
  void shutdown() {
    attached_.store(false, std::memory_order_release);
    std::vector<nccl_detail::pinned> keep;
    for (auto& [key, p] : host_) keep.push_back(std::move(p));
    for (auto& [type, z] : zeros_) keep.push_back(std::move(z));
    host_.clear();
    zeros_.clear();
    device_.release(std::move(keep), what_);
  }

 private:
  // An operation that announced a phase and waits for local rank 0's order to issue it.
  struct announced {
    work* w;
    tensor_state* t;
    step_state* s;
  };

  static constexpr std::size_t zeros_bytes = 1 << 20;  // pinned -0.0 source for broadcasts

  // The machine-wide order (local/impl/nccl_order.hpp).
  static std::uint64_t fingerprint(const work& w);
  std::string name_of(std::uint64_t key) const;
  void post(work& w, tensor_state& t, step_state& s, order_phase phase, std::uint32_t flags);
  void issue(const order_entry& e);
  template <class Call>
  void group(const tensor_state& t, const work& w, std::string_view name, Call call);
  void fill_negative_zero(std::byte* data, std::size_t count, dtype type, const std::string& what);

  void open(tensor_state& t, const work& w) {
    t.owners.clear();
    for (int l = 0; l < local_size_; ++l)
      t.owners.push_back(owned_range(w.count, l, local_size_, cluster_.slices));
    const auto [begin, end] = t.owners[static_cast<std::size_t>(local_rank_)];
    auto& host = host_[w.key];
    host = nccl_detail::pinned((end - begin) * dtype_size(w.type), w.what);
    t.host = &host;
    const auto [first, last] = owned_slices(local_rank_, local_size_, cluster_.slices);
    t.owned_first = w.parts.size();
    std::size_t owned = 0;
    for (std::size_t i = 0; i < w.parts.size(); ++i) {
      if (w.parts[i].slice < first || w.parts[i].slice >= last) continue;
      if (owned++ == 0) t.owned_first = i;
    }
    t.copied_out.clear();
    t.copied_in.clear();
    for (std::size_t i = 0; i < owned; ++i) {
      t.copied_out.push_back(nccl_detail::make_event(w.what));
      t.copied_in.push_back(nccl_detail::make_event(w.what));
    }
    t.open = true;
  }

  // Whether the device work before `event` ran; throws naming `doing` if it failed.
  bool copied(const std::shared_ptr<void>& event, const char* doing, const work& w) {
    device_.use_on_this_thread(what_);
    const cudaError_t e = cudaEventQuery(nccl_detail::event_of(event));
    if (e == cudaErrorNotReady) return false;
    nccl_detail::cuda_check(e, fmt::format("{} (cudaEventQuery)", doing), w.what);
    return true;
  }


  int local_rank_;
  int local_size_;
  std::chrono::milliseconds attach_timeout_;
  logger log_;
  std::string what_ = "bps::local::nccl";
  cluster cluster_;
  nccl_device device_{local_rank_, local_size_, log_};
  std::atomic<bool> attached_{false};
  // The stage thread only, then shutdown after it ended.
  std::unordered_map<std::uint64_t, nccl_detail::pinned> host_;    // by tensor key
  std::unordered_map<std::size_t, nccl_detail::pinned> zeros_;     // by dtype
  std::deque<order_entry> outbox_;                                 // not yet announced
  std::unordered_map<std::uint64_t, announced> awaiting_;          // by tensor key
};

static_assert(LocalCollective<nccl> && PartitionedSteps<nccl>);

}  // namespace bps::local

#include "byteps/local/impl/nccl_order.hpp"
