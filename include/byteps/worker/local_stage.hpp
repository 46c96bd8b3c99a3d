#pragma once
/// @file
/// `bps::worker::local_stage<L>`: the engine that runs a push_pull with several processes per
/// machine as one pipeline of named stages, for any local collective `L`:
///
///     reduce_scatter (L) -> network (push/pull of the owned slices) -> all_gather (L)
///
/// The worker owns it. It keeps the one record of each operation and the table of tensors (their
/// shape, round and the policy's per-tensor state; both in local_records.hpp), the deadline
/// checks and the failure path;
/// `L` supplies only its steps. The timeline (`detail::tracer`) gets the operation's span and a
/// span per local step. One stage thread runs every operation: it sleeps on the
/// machine's doorbell, which the other local ranks, the device and the network's completions
/// ring, so an idle job costs no CPU. While an operation is in a local step it first polls for
/// the policy's `poll_window()` after its last progress, where the policy has one
/// (`local::poll_window_of`): device steps finish sooner than a host function rings the bell.
///
/// Failure: a step that throws `communicator_error`, or an operation past its deadline in a
/// local step, declares the communicator dead (`die`, the worker's one failure path), which in
/// turn calls `fail` here: the stage thread then lets `L` abort the machine's collective and
/// fails every operation, each once the transport let go of its buffer. Any other exception
/// fails its operation alone and refuses the tensor afterwards.
///
/// @par Thread Safety
/// `submit` and `fail` may be called from any thread; `stop` once, from the owner.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/detail/tracer.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/local/shm.hpp"
#include "byteps/worker/local_records.hpp"

namespace bps::worker {

template <LocalSteps L>
class local_stage {
 public:
  using clock = std::chrono::steady_clock;
  /// Starts the servers' push_pull of `count` elements of host memory at `data` under `name`,
  /// bounded by `deadline` (the operation's own).
  using network_fn =
      std::function<handle(std::string name, std::string what, void* data, std::size_t count,
                           dtype type, push_pull_options opts, clock::time_point deadline)>;
  /// Declares the communicator dead (it calls `fail` back).
  using die_fn = std::function<void(const std::string& why)>;
  /// Tells the transport that a colocated peer may read `memory` by `name`
  /// (`work::owned_segment`), or with an empty `memory` that it may no longer. Null: nothing
  /// to tell.
  using share_fn = std::function<void(const std::string& name, std::span<std::byte> memory)>;

  local_stage(L& local, network_fn network, die_fn die, detail::tracer& trace,
              share_fn share = {})
      : local_(local),
        network_(std::move(network)),
        die_(std::move(die)),
        share_(std::move(share)),
        trace_(trace) {}
  local_stage(const local_stage&) = delete;
  local_stage& operator=(const local_stage&) = delete;
  ~local_stage() { stop(); }

  /// After `L::attach`: starts the stage thread.
  void start(const local::cluster& c) {
    cluster_ = c;
    bell_word_.store(local_.bell_word(), std::memory_order_release);
    stage_ = std::thread([this] { stage_loop(); });
    std::lock_guard lock(mu_);
    started_ = true;
  }

  /// Runs `w` through the pipeline; returns at once. Throws `usage_error` for a tensor whose
  /// shape differs from its first use, one still in flight, or one that failed before.
  handle submit(local::work w) {
    auto op = std::make_shared<operation>();
    op->w = std::move(w);
    op->w.key = tensor_key(op->w.name);
    auto state = std::make_shared<detail::op_state>();
    state->what = op->w.what;
    // For the timeline's bytes; nothing reads or writes through it (it may be device memory).
    state->data = {static_cast<std::byte*>(op->w.data), op->w.count * dtype_size(op->w.type)};
    state->type = op->w.type;
    state->key = op->w.key;
    state->deadline = op->w.deadline;
    state->on_deadline = [this](detail::op_state&) { ring(); };
    op->w.state = state;
    throw_if_closed(op->w.what);
    local_.begin(op->w, op->step);
    {
      std::lock_guard lock(mu_);
      throw_if_closed_locked(op->w.what);
      tensor& t = tensors_.admit(op->w);
      if (op->w.count == 0) {
        state->finish(nullptr);
        return handle(state);
      }
      t.busy = true;
      op->t = &t;
      op->w.round = t.round;
      trace_.begin(*state, op->w.name, t.round, 0);  // before the stage thread can see it
      incoming_.push_back(op);
    }
    ring();
    return handle(state);
  }

  /// The communicator is dead: every operation fails with `why` (after `L::abort`).
  void fail(const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (failure_.empty()) failure_ = why;
    }
    ring();
  }

  /// The communicator is leaving the job: what is in flight fails (the machine's collective is
  /// aborted only if something was), later calls are refused. Idempotent.
  void close() {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      if (failure_.empty()) failure_ = "the communicator was shut down before it finished";
    }
    ring();
  }

  /// Closes, ends the stage thread, and lets go of the tensors' state (their shared memory)
  /// before the policy shuts down. Idempotent.
  void stop() {
    close();
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    ring();
    if (stage_.joinable()) stage_.join();
    // Nothing rings the policy's doorbell from here on: the policy may unmap it.
    bell_word_.store(nullptr, std::memory_order_release);
    for (const auto& name : shared_) share_(name, {});  // before the segments are unmapped
    std::lock_guard lock(mu_);
    tensors_.clear();
  }

 private:
  using tensor = local_tensor<L>;
  using operation = local_operation<L>;
  using operation_ptr = std::shared_ptr<operation>;
  using stage = local_step_at;

  void throw_if_closed(const std::string& what) {
    std::lock_guard lock(mu_);
    throw_if_closed_locked(what);
  }
  void throw_if_closed_locked(const std::string& what) const {
    if (stopped_ || closing_)
      throw usage_error(what + ": this communicator was shut down; create a new one");
    if (!failure_.empty()) throw communicator_error("this communicator is dead: " + failure_);
    if (!started_)
      throw usage_error(what +
                        ": the local stage has not started (the communicator starts it "
                        "when it joins the cluster)");
  }

  void ring() {
    // fail() may come from an I/O thread before start() read the policy's doorbell.
    if (auto* word = bell_word_.load(std::memory_order_acquire)) local::doorbell(word).ring();
  }

  void stage_loop();

  static bool in_local_step(const std::vector<operation_ptr>& active) {
    return std::any_of(active.begin(), active.end(),
                       [](const operation_ptr& op) { return op->at != stage::network; });
  }

  // One pass over everything; true when anything moved. Throws what kills the communicator:
  // a step's communicator_error, anything from `progress`, a deadline passed in a local step.
  bool step(std::vector<operation_ptr>& active);

  // Moves `op` as far as it can go now; true if it moved. Sets `done` once it finished.
  bool advance(operation& op, bool& done);

  // The network stage: each owned slice through the servers, in place in the host memory that
  // reduce_scatter left at `work::owned`.
  void start_network(operation& op) {
    const local::work& w = op.w;
    const auto esize = dtype_size(w.type);
    const auto base =
        local::owned_range(w.count, local_.local_rank(), local_.local_size(), cluster_.slices)
            .first;
    const auto [first, last] =
        local::owned_slices(local_.local_rank(), local_.local_size(), cluster_.slices);
    for (int s = first; s < last; ++s) {
      const auto [begin, end] = local::slice_range(w.count, s, cluster_.slices);
      void* data = end > begin ? w.owned + (begin - base) * esize : nullptr;
      auto h = network_(local::slice_name(w.name, s),
                        fmt::format("{} (slice {} of {})", w.what, s, cluster_.slices), data,
                        end - begin, w.type, w.opts, w.deadline);
      h.when_done([this] { ring(); });
      op.slices.push_back(std::move(h));
    }
  }

  // A segment's first operation names it (`work::owned_segment`): shared with the transport
  // until `stop`.
  void share(const local::named_memory& segment) {
    if (!share_ || segment.name.empty()) return;
    share_(segment.name, segment.mapping);
    shared_.push_back(segment.name);
  }

  // `op` alone failed: a step threw something other than communicator_error.
  void fail_one(operation& op, std::exception_ptr e, const std::string& why) {
    wait_for_network(op);
    local_.abandon(op.w, op.t->local, op.step);
    {
      std::lock_guard lock(mu_);
      op.t->broken = why;
    }
    finish(op, op.w.error ? op.w.error : std::move(e));
  }

  void fail_all(std::vector<operation_ptr>& active, const std::string& why) {
    for (auto& op : active) {
      wait_for_network(*op);
      local_.abandon(op->w, op->t->local, op->step);
      auto text = why.starts_with(op->w.what) ? why : op->w.what + ": " + why;
      finish(*op, std::make_exception_ptr(communicator_error(text)));
    }
    active.clear();
  }

  // The communicator fails the slices of a dead operation; their handles complete once the
  // transport let go of the memory they point into. A push a colocated server reads by
  // reference (`share_`) it may still read after that: its tensor is refused from then on, so
  // nothing writes those bytes again (the network stage's payloads are only ever rewritten by
  // their answers or by the tensor's next operation, both after the server read them).
  static void wait_for_network(operation& op) {
    for (auto& h : op.slices) {
      try {
        h.wait_for(std::chrono::seconds(10));
      } catch (...) {
      }
    }
  }

  void finish(operation& op, std::exception_ptr e) {
    {
      std::lock_guard lock(mu_);
      op.t->busy = false;
    }
    op.w.state->finish(std::move(e));
  }

  L& local_;
  network_fn network_;
  die_fn die_;
  share_fn share_;
  std::vector<std::string> shared_;  // segments shared so far; stage thread, then stop
  detail::tracer& trace_;
  local::cluster cluster_;
  std::atomic<std::atomic<std::uint32_t>*> bell_word_{nullptr};  // the machine's doorbell
  std::mutex mu_;
  local_tensors<L> tensors_;
  std::deque<operation_ptr> incoming_;
  std::string failure_;
  bool closing_ = false;
  bool started_ = false;
  bool stopped_ = false;
  std::thread stage_;
};

/// What a communicator runs for its local collective `L`: the engine above, or nothing at all
/// for `is_identity` policies (their pipeline is the push and pull alone).
struct no_local_stage {
  template <class... Args>
  explicit no_local_stage(Args&&...) {}
};

template <class L, bool identity = L::is_identity>
struct local_stage_of {
  using type = local_stage<L>;
};
template <class L>
struct local_stage_of<L, true> {
  using type = no_local_stage;
};
template <class L>
using local_stage_for = typename local_stage_of<L>::type;

}  // namespace bps::worker

#include "byteps/worker/impl/local_stage_loop.hpp"
