#pragma once
/// @file
/// The bodies of worker/stats.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::worker {

void running_union::add(clock::time_point from, clock::time_point to) {
  if (settled_ && from < settled_reach_) from = settled_reach_;
  if (to < from) return;  // wholly inside what was settled
  while (!runs_.empty() && runs_.back().second >= from) {
    from = std::min(from, runs_.back().first);
    to = std::max(to, runs_.back().second);
    open_ -= runs_.back().second - runs_.back().first;
    runs_.pop_back();
  }
  runs_.emplace_back(from, to);
  open_ += to - from;
  if (runs_.size() > max_runs_) {
    const auto [oldest_from, oldest_to] = runs_.front();
    settled_total_ += oldest_to - oldest_from;
    open_ -= oldest_to - oldest_from;
    settled_reach_ = oldest_to;
    settled_ = true;
    runs_.pop_front();
  }
}

void stats_recorder::operation(const std::string& tensor, std::uint64_t bytes, const op_timing& t) {
  const auto now = clock::now();
  records_.push_back(record{&tensor, bytes, t.started, now, t});
  ++totals_.operations;
  totals_.bytes += bytes;
  totals_.stages.add(t.stages);
  busy_since_start_.add(t.started, now);
  forget_before(now - window_);
  if (records_.size() > max_records) records_.pop_front();
}

comm_stats stats_recorder::snapshot(std::size_t in_flight) {
  const auto now = clock::now();
  forget_before(now - window_);
  comm_stats s;
  s.window_seconds = seconds(std::min<clock::duration>(window_, now - since_));
  s.bytes_per_server = bytes_per_server_;
  s.batches = batches_;
  s.batched_partitions = batched_partitions_;
  s.answer_batches = answer_batches_;
  s.batched_answers = batched_answers_;
  s.in_flight = in_flight;
  s.since_start = totals_;
  s.since_start.seconds = seconds(now - since_);
  s.since_start.busy_seconds = busy_since_start_.seconds();
  std::unordered_map<const std::string*,
                     std::vector<std::pair<clock::time_point, clock::time_point>>>
      spans;
  std::vector<std::pair<clock::time_point, clock::time_point>> all;
  std::unordered_map<const std::string*, tensor_stats> per_tensor;
  for (const auto& r : records_) {
    ++s.operations;
    s.bytes += r.bytes;
    s.stages.add(r.timing.stages);
    all.emplace_back(r.started, r.finished);
    spans[r.tensor].emplace_back(r.started, r.finished);
    auto& t = per_tensor[r.tensor];
    ++t.operations;
    t.bytes += r.bytes;
  }
  for (const auto& r : local_records_) s.stages.add(r.stages);
  s.busy_seconds = union_seconds(all);
  for (auto& [name, t] : per_tensor) {
    t.name = *name;
    t.busy_seconds = union_seconds(spans[name]);
    s.tensors.push_back(std::move(t));
  }
  std::sort(s.tensors.begin(), s.tensors.end(), [](const auto& a, const auto& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
  });
  return s;
}

double stats_recorder::union_seconds(
    std::vector<std::pair<clock::time_point, clock::time_point>>& spans) {
  std::sort(spans.begin(), spans.end());
  clock::duration total{};
  clock::time_point reach{};
  bool any = false;
  for (const auto& [from, to] : spans) {
    if (!any || from > reach) {
      total += to - from;
      reach = to;
      any = true;
    } else if (to > reach) {
      total += to - reach;
      reach = to;
    }
  }
  return seconds(total);
}

void stats_recorder::forget_before(clock::time_point t) {
  while (!records_.empty() && records_.front().finished < t) records_.pop_front();
  while (!local_records_.empty() && local_records_.front().finished < t) local_records_.pop_front();
}

}  // namespace bps::worker
