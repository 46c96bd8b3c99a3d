#pragma once
/// @file
/// `bps::worker::local_stage<L>`: the engine that runs a push_pull with a local collective `L`
/// (several processes per machine, or a device) as one pipeline of named stages (`bps::stage`):
///
///     local_reduce (L) -> queue -> push -> pull -> local_gather (L)
///
/// per partition: with a policy of `PartitionedSteps` each partition this rank owns is pushed as
/// soon as it is reduced (`local::host`) or copied to host (`local::nccl`), and each partition's
/// sum is gathered (copied out of shared memory, or back to the device) as soon as it is back,
/// while the others are still on the network. A policy without them reduces the whole tensor
/// first and gathers it once every owned partition is back.
///
/// The operation has one record, its `op_state` (`work::state`): the caller's handle waits on
/// it, and the worker's network stage awaits its owned partitions in it (`network_port::open`;
/// no push_pull is nested in another). The engine keeps the table of tensors (shape, round,
/// partitions, the policy's per-tensor state) and what it knows of each operation
/// (local_records.hpp), what an expired operation waits for and the failure path; `L`
/// supplies only its steps. The timeline (`detail::tracer`) gets the operation's span and a
/// span per local step. One stage thread runs every operation: it sleeps on the machine's
/// doorbell, which the other local ranks, the device and the network's answers ring, so an
/// idle job costs no CPU. While an operation is in a local step it first polls for the
/// policy's `poll_window()` after its last progress, where the policy has one
/// (`local::poll_window_of`): device steps finish sooner than a host function rings the bell.
///
/// Failure: a step that throws `communicator_error`, or an operation past its deadline in a
/// local step (the worker's `deadline_timer` marks it expired and rings the doorbell), declares
/// the communicator dead (`die`, the worker's one failure path). The stage keeps no failure of
/// its own: it reads the worker's one flag (`liveness`), and once that says dead or closing
/// (`wake_to_end` rings it) the stage thread lets `L` abort the machine's collective and fails
/// every operation with the flag's reason, each once the network let go of its memory. An
/// operation past its deadline on the network is the network's to name
/// (`network_port::expire`). Any other exception fails its operation alone and refuses the
/// tensor afterwards.
///
/// @par Thread Safety
/// `submit` and `wake_to_end` may be called from any thread; `stop` once, from the owner.

#include <fmt/core.h>

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

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/core/stage.hpp"
#include "byteps/detail/clock_sync.hpp"
#include "byteps/detail/tracer.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/local/shm.hpp"
#include "byteps/worker/deadline_timer.hpp"
#include "byteps/worker/liveness.hpp"
#include "byteps/worker/local_records.hpp"
#include "byteps/worker/stats.hpp"

namespace bps::worker {

/// What the local stage asks of the worker's network stage (`worker::node` gives it).
struct network_port {
  /// The partitions of a tensor named `name` of `count` elements of `type`, slice by slice
  /// (`work::parts`). Pure: the same on every local rank and machine.
  std::function<std::vector<local::part>(const std::string& name, std::size_t count, dtype type)>
      plan;
  /// Awaits the partitions at positions [first, last) of `w.parts` (this rank's, reduced into
  /// `w.owned` from the first one's place on) in `w.state`; none is queued until `release`d. Its
  /// `op_state::next` tells what came back. Throws `usage_error` (a slice's shape or compressor
  /// differs from its first use, its name is taken) or `communicator_error` (dead).
  std::function<void(const local::work& w, std::size_t first, std::size_t last)> open;
  /// Queues partition `w.parts[i]` of an opened operation (its sum in `work::owned` is ready).
  std::function<void(const local::work& w, std::size_t i)> release;
  /// Fails the network stage of `state` with `e` (nothing more is queued; `next.network_done`
  /// follows once the transport let go of its memory).
  std::function<void(const std::shared_ptr<detail::op_state>& state, std::exception_ptr e)> cancel;
  /// `state` passed its deadline on the network: the worker names what it still awaits and
  /// dies.
  std::function<void(detail::op_state& state)> expire;
  /// The local steps' times of an operation that succeeded, for `comm.stats()`.
  std::function<void(const stage_times& times)> record;
};

template <LocalSteps L>
class local_stage {
 public:
  using clock = std::chrono::steady_clock;
  /// Declares the communicator dead (the worker then calls `wake_to_end`).
  using die_fn = std::function<void(const std::string& why)>;
  /// Tells the transport that a colocated peer may read `memory` by `name`
  /// (`work::owned_segment`), or with an empty `memory` that it may no longer. Null: nothing
  /// to tell.
  using share_fn = std::function<void(const std::string& name, std::span<std::byte> memory)>;

  /// `wait_poll`: how long a wait on an operation's handle polls first (`Config::wait_poll`).
  local_stage(L& local, network_port network, die_fn die, const liveness& life,
              detail::tracer& trace, deadline_timer& deadlines, std::chrono::microseconds wait_poll,
              share_fn share = {})
      : wait_poll_(wait_poll),
        local_(local),
        network_(std::move(network)),
        die_(std::move(die)),
        life_(life),
        share_(std::move(share)),
        trace_(trace),
        deadlines_(deadlines) {}
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
    state->wait_poll = wait_poll_;
    state->on_deadline = [this](detail::op_state&) { ring(); };  // the loop names the wait
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
      if (t.plan.empty()) plan(t, op->w);
      t.busy = true;
      op->t = &t;
      op->w.round = t.round;
      op->w.parts = t.plan;
      op->next_reduce = t.owned_first;
      trace_.begin(*state, op->w.name, t.round, t.plan.size());  // before the stage thread
      incoming_.push_back(op);
    }
    deadlines_.watch(state);
    ring();
    return handle(state);
  }

  /// The worker's flag (`liveness`) says dead or closing: the stage thread fails every
  /// operation with its reason (after `L::abort`, unless a clean shutdown found nothing in
  /// flight), and later calls are refused.
  void wake_to_end() { ring(); }

  /// Ends the stage thread once the worker's flag says closing, and lets go of the tensors'
  /// state (their shared memory) before the policy shuts down. Idempotent.
  void stop() {
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

  // Whether the policy's reduce_scatter and all_gather are a local_reduce and a local_gather
  // of the whole tensor (every step of a policy without PartitionedSteps is).
  static constexpr bool whole_steps = [] {
    if constexpr (PartitionedSteps<L>)
      return L::partitioned.whole_steps;
    else
      return true;
  }();

  static std::size_t tensor_bytes(const operation& op) {
    return op.w.count * dtype_size(op.w.type);
  }

  // A whole-tensor local step of `op` that began at `began_ns` ended now: its time for
  // `comm.stats()` and its span on the timeline.
  void timed_step(operation& op, stage s, std::int64_t began_ns) {
    const auto now = detail::steady_ns();
    op.times.add(s, static_cast<double>(now - began_ns) * 1e-9);
    trace_.local_step(*op.w.state, s, began_ns, tensor_bytes(op));
  }

  // The same for partition `i` of `op` (`bytes` long).
  void timed_part(operation& op, stage s, std::size_t i, std::int64_t began_ns, std::size_t bytes) {
    const auto now = detail::steady_ns();
    op.times.add(s, static_cast<double>(now - began_ns) * 1e-9);
    trace_.local_part(*op.w.state, s, i, began_ns, bytes);
  }

  void throw_if_closed(const std::string& what) {
    std::lock_guard lock(mu_);
    throw_if_closed_locked(what);
  }
  void throw_if_closed_locked(const std::string& what) const {
    if (stopped_) throw usage_error(what + ": this communicator was shut down; create a new one");
    life_.throw_if_gone(what);
    if (!started_)
      throw usage_error(what +
                        ": the local stage has not started (the communicator starts it "
                        "when it joins the cluster)");
  }

  void ring() {
    // wake_to_end() may come from an I/O thread before start() read the policy's doorbell.
    if (auto* word = bell_word_.load(std::memory_order_acquire)) local::doorbell(word).ring();
  }

  void stage_loop();

  // Whether some operation waits for a local step (the other local ranks, or the device: a
  // step, a partition's copy out).
  static bool in_local_step(const std::vector<operation_ptr>& active) {
    return std::any_of(active.begin(), active.end(), [](const operation_ptr& op) {
      return op->at != local_phase::per_partition || op->next_reduce < op->t->owned_last;
    });
  }

  // Whether some operation of a policy that gathers only its owned partitions one by one
  // (a device's copies in) has a partition handed back and not yet seen gathered: nothing rings
  // when such a copy is done (a host function per partition would hold the stream about 20 us
  // each), so the thread polls for it in its poll window and looks again every copy_in_poll.
  static constexpr auto copy_in_poll = std::chrono::microseconds(100);
  static bool awaits_copy_in(const std::vector<operation_ptr>& active) {
    if constexpr (PartitionedSteps<L>) {
      if constexpr (!L::partitioned.every_partition)
        return std::any_of(active.begin(), active.end(), [](const operation_ptr& op) {
          return op->at == local_phase::per_partition && op->backs > op->gathered_count;
        });
    }
    return false;
  }

  // One pass over everything; true when anything moved. Throws what kills the communicator:
  // a step's communicator_error, anything from `progress`, a deadline passed in a local step.
  bool step(std::vector<operation_ptr>& active);

  // Moves `op` as far as it can go now; true if it moved. Sets `done` once it finished.
  bool advance(operation& op, bool& done);

  // The partitions' flow between reduce_scatter and all_gather; true if anything moved.
  bool flow(operation& op);

  // The tensor's partitions at its first use: the network's plan, and this rank's run of it.
  void plan(tensor& t, const local::work& w) {
    t.plan = network_.plan(w.name, w.count, w.type);
    const auto [first, last] =
        local::owned_slices(local_.local_rank(), local_.local_size(), cluster_.slices);
    t.owned_first = t.plan.size();
    t.owned_last = t.plan.size();
    for (std::size_t i = 0; i < t.plan.size(); ++i) {
      if (t.plan[i].slice < first || t.plan[i].slice >= last) continue;
      if (t.owned_first == t.plan.size()) t.owned_first = i;
      t.owned_last = i + 1;
    }
  }

  // The network stage of `op`: its owned partitions awaited in its record, none queued yet.
  // `op_state::next` reports what comes back; a rank that owns no partition is done with the
  // network at once.
  void open_network(operation& op) {
    auto net = std::make_shared<network_progress>(op.w.parts.size());
    op.back.assign(op.w.parts.size(), 0);
    op.gathered.assign(op.w.parts.size(), 0);
    auto& next = op.w.state->next;
    next.part_answered = [this, net](std::size_t i) {
      net->answered[i].store(1, std::memory_order_release);
      ring();
    };
    next.network_done = [this, net](std::exception_ptr e) {
      net->error = std::move(e);
      net->done.store(true, std::memory_order_release);
      ring();
    };
    op.net = std::move(net);
    if (op.t->owned_first == op.t->owned_last) {
      op.net->done.store(true, std::memory_order_release);
      return;
    }
    network_.open(op.w, op.t->owned_first, op.t->owned_last);
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
    if (op.net && !op.net->done.load(std::memory_order_acquire)) network_.cancel(op.w.state, e);
    wait_for_network(op, clock::now() + std::chrono::seconds(10));
    local_.abandon(op.w, op.t->local, op.step);
    {
      std::lock_guard lock(mu_);
      op.t->broken = why;
    }
    finish(op, op.w.error ? op.w.error : std::move(e));
  }

  void fail_all(std::vector<operation_ptr>& active, const std::string& why) {
    const auto until = clock::now() + std::chrono::seconds(10);  // one bound for them all
    for (auto& op : active) {
      auto text = why.starts_with(op->w.what) ? why : op->w.what + ": " + why;
      auto e = std::make_exception_ptr(communicator_error(text));
      if (op->net && !op->net->done.load(std::memory_order_acquire))
        network_.cancel(op->w.state, e);
      wait_for_network(*op, until);
      local_.abandon(op->w, op->t->local, op->step);
      finish(*op, e);
    }
    active.clear();
  }

  // A failed operation's network stage ends once the transport let go of the memory it points
  // into (bounded by `until`: links close fast). A push a colocated server reads by reference
  // (`share_`) it may still read after that: its tensor is refused from then on, so nothing writes
  // those bytes again (the network stage's payloads are only ever rewritten by their answers or by
  // the tensor's next operation, both after the server read them).
  static void wait_for_network(operation& op, clock::time_point until) {
    if (!op.net) return;
    while (!op.net->done.load(std::memory_order_acquire) && clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  void finish(operation& op, std::exception_ptr e) {
    {
      std::lock_guard lock(mu_);
      op.t->busy = false;
    }
    if (!e && network_.record) network_.record(op.times);
    op.w.state->finish(std::move(e));
  }

  std::chrono::microseconds wait_poll_;  // each operation's `op_state::wait_poll`
  L& local_;
  network_port network_;
  die_fn die_;
  const liveness& life_;  // the worker's one failure flag
  share_fn share_;
  std::vector<std::string> shared_;  // segments shared so far; stage thread, then stop
  detail::tracer& trace_;
  deadline_timer& deadlines_;
  local::cluster cluster_;
  std::atomic<std::atomic<std::uint32_t>*> bell_word_{nullptr};  // the machine's doorbell
  std::mutex mu_;
  local_tensors<L> tensors_;
  std::deque<operation_ptr> incoming_;
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
