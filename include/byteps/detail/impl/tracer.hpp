#pragma once
/// @file
/// The bodies of detail/tracer.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::detail {

void tracer::begin(op_state& op, const std::string& tensor, std::uint64_t round,
                   std::size_t parts) {
  if (!rec_ || !rec_->in_window(op.key, round, !tensor.starts_with("broadcast:"))) return;
  auto t = std::make_shared<op_trace>();
  t->begun_ns = steady_ns();
  t->round = round;
  t->dispatched_ns = std::vector<std::atomic<std::int64_t>>(parts);
  t->sent_ns = std::vector<std::atomic<std::int64_t>>(parts);
  t->queued_ns = std::vector<std::atomic<std::int64_t>>(parts);
  const auto lane = rec_->lane(op.key, -1, -1, [&] { return tensor; });
  t->lane = lane;
  for (std::size_t i = 0; i < parts; ++i)  // lanes of a tensor's partitions follow its own
    rec_->lane(op.key, static_cast<std::int64_t>(i), -1,
               [&] { return fmt::format("{} part {}", tensor, i); });
  t->on_finish = [rec = rec_.get(), lane, bytes = op.data.size()](const op_state& o) {
    const auto end = span_end(o.trace->begun_ns);
    rec->add({.phase = 'X',
              .lane = lane,
              .ts_ns = o.trace->begun_ns,
              .dur_ns = end - o.trace->begun_ns,
              .round = static_cast<std::int64_t>(o.trace->round),
              .bytes = bytes,
              .failed = o.failure != nullptr});
  };
  op.trace = std::move(t);
}

void tracer::local_step(op_state& op, stage s, std::int64_t began_ns, std::size_t bytes) {
  if (!op.trace) return;
  const auto began = std::max(began_ns, op.trace->begun_ns);
  rec_->add({.phase = 'X',
             .lane = op.trace->lane,
             .name = stage_name(s),
             .ts_ns = began,
             .dur_ns = span_end(began) - began,
             .round = static_cast<std::int64_t>(op.trace->round),
             .bytes = bytes});
}

}  // namespace bps::detail
