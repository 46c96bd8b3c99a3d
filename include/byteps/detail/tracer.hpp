#pragma once
/// @file
/// `detail::tracer`: a node's handle on the timeline (detail/trace.hpp). It owns a
/// `trace_recorder` when BYTEPS_TRACE_ON=1 and nothing otherwise. Every hook first tests that
/// pointer (a worker's per-partition hooks test the operation's `op_state::trace` instead), so
/// with tracing off a hook costs one branch: no allocation, no clock read, no lock.
///
/// Hooks (one call each where the work happens):
/// - worker: `begin` when an operation starts, `dispatched` when a partition is handed to the
///   transport, `sent` when the transport is done with it, `answered` when its sum is in; the
///   tensor's span ends in `op_state::finish`. Span names are `bps::stage`'s. A partition is
///   named by its position among the operation's partitions (its lane) and, for the flows that
///   join worker and server, by its key and index on the wire. With a local stage
///   (worker/local_stage.hpp) the operation's partitions are those of the whole tensor, and
///   `local_part` records each one's `local_reduce` and `local_gather` on its lane (or
///   `local_step` a step the policy runs on the whole tensor, on the tensor's lane).
/// - server: `pushed` after a traced push was summed, `answered` when its round's sum was sent.
///
/// Timestamps: `detail::steady_ns()`. Spans are at least 2 ns long, so a flow's end can sit
/// strictly inside its span (Chrome binds a flow event to the span enclosing its time).
///
/// @par Thread Safety
/// All hooks may be called from any thread.

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/core/stage.hpp"
#include "byteps/detail/clock_sync.hpp"
#include "byteps/detail/trace.hpp"

namespace bps::detail {

class tracer {
 public:
  tracer(const Config& cfg, role r)
      : rec_(cfg.trace_on ? std::make_unique<trace_recorder>(cfg, r) : nullptr) {}

  bool on() const noexcept { return rec_ != nullptr; }
  /// The time for a hook to come; 0 (and no clock read) when tracing is off.
  std::int64_t now() const noexcept { return rec_ ? steady_ns() : 0; }
  trace_recorder* recorder() const noexcept { return rec_.get(); }

  /// See `trace_recorder::name_node`.
  void name_node(int rank, std::string name, int wire_rank) {
    if (rec_) rec_->name_node(rank, std::move(name), wire_rank);
  }

  // ---- worker ----

  /// Operation `op` on tensor `tensor` (round `round`, `parts` partitions) starts. Traced (it
  /// gets `op.trace`) when it is in the step window.
  BYTEPS_DECL void begin(op_state& op, const std::string& tensor, std::uint64_t round,
                         std::size_t parts);

  /// A local stage released partition `part` of `op` to the scheduler: its `queue` span
  /// starts (else it starts with the operation).
  void queued(op_state& op, std::size_t part) {
    if (op.trace) op.trace->queued_ns[part] = steady_ns();
  }

  /// Partition `part` of `op` goes to the transport, to server `server`: its `queue` span ends.
  void dispatched(op_state& op, std::size_t part, int server) {
    if (!op.trace) return;
    const std::int64_t queued = op.trace->queued_ns[part],
                       began = queued != 0 ? queued : op.trace->begun_ns;
    const auto now = std::max(steady_ns(), began);
    op.trace->dispatched_ns[part] = now;
    rec_->add({.phase = 'X',
               .lane = part_lane(op, part),
               .name = stage_name(stage::queue),
               .ts_ns = began,
               .dur_ns = now - began,
               .round = static_cast<std::int64_t>(op.trace->round),
               .part = static_cast<std::int32_t>(part),
               .peer = server});
  }

  /// The transport is done with partition `part`'s payload (wire key `key`, index `wire_part`):
  /// its `push` span ends, and the `push` flow to the server starts in it.
  void sent(op_state& op, std::size_t part, std::uint64_t key, std::uint32_t wire_part) {
    if (!op.trace) return;
    const std::int64_t began = op.trace->dispatched_ns[part], end = span_end(began);
    op.trace->sent_ns[part] = end;
    const auto lane = part_lane(op, part);
    const auto round = static_cast<std::int64_t>(op.trace->round);
    rec_->add({.phase = 'X',
               .lane = lane,
               .name = stage_name(stage::push),
               .ts_ns = began,
               .dur_ns = end - began,
               .round = round,
               .part = static_cast<std::int32_t>(part)});
    rec_->add({.phase = 's',
               .lane = lane,
               .name = stage_name(stage::push),
               .ts_ns = began + 1,
               .flow = trace_flow_id(rec_->wire_rank(), key, wire_part, op.trace->round, true)});
  }

  /// Partition `part`'s sum is in: its `pull` span (from `sent`) ends, with the `pull` flow
  /// from the server.
  void answered(op_state& op, std::size_t part, std::uint64_t key, std::uint32_t wire_part) {
    if (!op.trace) return;
    const std::int64_t now = steady_ns(), sent = op.trace->sent_ns[part];
    const std::int64_t began = sent != 0 && sent <= now ? sent : now;  // the answer beat on_sent
    const auto lane = part_lane(op, part);
    rec_->add({.phase = 'X',
               .lane = lane,
               .name = stage_name(stage::pull),
               .ts_ns = began,
               .dur_ns = now + 2 - began,
               .round = static_cast<std::int64_t>(op.trace->round),
               .part = static_cast<std::int32_t>(part)});
    rec_->add({.phase = 'f',
               .lane = lane,
               .name = stage_name(stage::pull),
               .ts_ns = now + 1,
               .flow = trace_flow_id(rec_->wire_rank(), key, wire_part, op.trace->round, false)});
  }

  /// Stage `s` of the local stage (`local_reduce`, `local_gather`, `copy_out`, `copy_in`) ran on
  /// the whole tensor of traced operation `op` from `began_ns` (clamped to the operation's
  /// begin; 0 for "since it began") until now: a span on its tensor's lane, inside its span.
  BYTEPS_DECL void local_step(op_state& op, stage s, std::int64_t began_ns, std::size_t bytes);

  /// Stage `s` of the local stage ran on partition `part` of traced operation `op` (its
  /// position in the local stage's plan) from `began_ns` until now: a span on its lane.
  void local_part(op_state& op, stage s, std::size_t part, std::int64_t began_ns,
                  std::size_t bytes) {
    if (!op.trace) return;
    const auto began = std::max(began_ns, op.trace->begun_ns);
    rec_->add({.phase = 'X',
               .lane = part_lane(op, part),
               .name = stage_name(s),
               .ts_ns = began,
               .dur_ns = span_end(began) - began,
               .round = static_cast<std::int64_t>(op.trace->round),
               .part = static_cast<std::int32_t>(part),
               .bytes = bytes});
  }

  // ---- server ----

  /// Worker `worker`'s traced push of partition (`key`, `part`) in `round`: read from
  /// `received_ns` to `arrived_ns`, summed from `sum_ns` to `summed_ns`. Returns when the
  /// `sum` span ended (for `answered`'s `wait`). `tensor_name()` names the lane.
  template <class NameFn>
  std::int64_t pushed(std::uint64_t key, std::uint32_t part, std::uint64_t round, int worker,
                      std::uint64_t bytes, std::int64_t received_ns, std::int64_t arrived_ns,
                      std::int64_t sum_ns, std::int64_t summed_ns, NameFn&& tensor_name) {
    if (!rec_) return 0;
    const auto lane = server_lane(key, part, worker, tensor_name);
    const auto r = static_cast<std::int64_t>(round);
    const auto p = static_cast<std::int32_t>(part);
    summed_ns = std::max(summed_ns, sum_ns + 2);
    rec_->add({.phase = 'X',
               .lane = lane,
               .name = "receive",
               .ts_ns = received_ns,
               .dur_ns = arrived_ns - received_ns,
               .round = r,
               .part = p,
               .peer = worker,
               .bytes = bytes});
    rec_->add({.phase = 'X',
               .lane = lane,
               .name = "sum",
               .ts_ns = sum_ns,
               .dur_ns = summed_ns - sum_ns,
               .round = r,
               .part = p,
               .peer = worker});
    rec_->add({.phase = 'f',
               .lane = lane,
               .name = "push",
               .ts_ns = sum_ns + 1,
               .flow = trace_flow_id(worker, key, part, round, true)});
    return summed_ns;
  }

  /// The round's sum went out to worker `worker` (whose push was summed by `summed_ns`): its
  /// `wait` for the other workers (until `complete_ns`) and the `answer` (until now), where the
  /// `pull` flow to the worker starts.
  template <class NameFn>
  void answered(std::uint64_t key, std::uint32_t part, std::uint64_t round, int worker,
                std::int64_t summed_ns, std::int64_t complete_ns, NameFn&& tensor_name) {
    if (!rec_ || summed_ns == 0) return;
    const auto lane = server_lane(key, part, worker, tensor_name);
    const auto r = static_cast<std::int64_t>(round);
    const auto p = static_cast<std::int32_t>(part);
    complete_ns = std::max(complete_ns, summed_ns);
    const auto end = span_end(complete_ns);
    rec_->add({.phase = 'X',
               .lane = lane,
               .name = "wait",
               .ts_ns = summed_ns,
               .dur_ns = complete_ns - summed_ns,
               .round = r,
               .part = p,
               .peer = worker});
    rec_->add({.phase = 'X',
               .lane = lane,
               .name = "answer",
               .ts_ns = complete_ns,
               .dur_ns = end - complete_ns,
               .round = r,
               .part = p,
               .peer = worker});
    rec_->add({.phase = 's',
               .lane = lane,
               .name = "pull",
               .ts_ns = complete_ns + 1,
               .flow = trace_flow_id(worker, key, part, round, false)});
  }

  /// Writes the node's file (once), logging where, or at WARNING why not.
  void write(const clock_offset& clock, const logger& log) {
    if (!rec_ || rec_->written()) return;
    const auto events = rec_->size();
    if (auto problem = rec_->write(clock); !problem.empty())
      log.warn("timeline: {}", problem);
    else if (auto path = rec_->path(); !path.empty())
      log.info("timeline: {} events in {} (clock offset to the scheduler {} us, from {} samples)",
               events, path, clock.offset_ns / 1000, clock.samples);
  }

 private:
  // Now, as the end of a span that began at `began_ns`: at least 2 ns after it, so that a flow
  // event can sit strictly inside the span.
  static std::int64_t span_end(std::int64_t began_ns) noexcept {
    return std::max(steady_ns(), began_ns + 2);
  }

  std::uint32_t part_lane(const op_state& op, std::size_t part) {
    return rec_->lane(op.key, static_cast<std::int64_t>(part), -1,
                      [] { return std::string("?"); });  // made in begin
  }
  template <class NameFn>
  std::uint32_t server_lane(std::uint64_t key, std::uint32_t part, int worker, NameFn& name) {
    return rec_->lane(key, part, worker,
                      [&] { return fmt::format("{} part {} / worker {}", name(), part, worker); });
  }

  std::unique_ptr<trace_recorder> rec_;
};

}  // namespace bps::detail

#if BYTEPS_INCLUDE_BODIES
#include "byteps/detail/impl/tracer.hpp"
#endif
