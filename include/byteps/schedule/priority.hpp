#pragma once
/// @file
/// `bps::schedule::priority`: highest priority first, then earlier push_pull calls, then lower
/// partition index; at most `BYTEPS_SCHEDULING_CREDIT` partitions' worth of bytes in flight
/// (0: no bound), a partition's worth being the partitioner's `credit_unit_of` (with
/// `partition::by_bytes`: 1 MiB in auto mode, else the partition size), which the communicator
/// passes in (`make_scheduler`). The credit keeps the send queue short, so that a
/// high-priority gradient that becomes ready late (the first layer's, at the end of the backward
/// pass) overtakes the bytes of lower layers instead of queueing behind them (ByteScheduler,
/// SOSP'19). On by default, unlike BytePS.

#include <cstddef>
#include <optional>
#include <queue>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/schedule/scheduler.hpp"

namespace bps::schedule {

class priority {
 public:
  /// `partition_bytes`: a partition's worth, what the credit counts in (`credit_unit_of` the
  /// partitioner in use).
  priority(const Config& cfg, std::size_t partition_bytes)
      : credit_(static_cast<std::size_t>(cfg.scheduling_credit) * partition_bytes) {}

  void push(const send_task& t) { queue_.push(t); }

  /// The next partition, or nothing while the credit is used up. One partition may always be
  /// in flight, so a partition larger than the credit still goes.
  std::optional<send_task> pop() {
    if (queue_.empty()) return std::nullopt;
    const send_task& top = queue_.top();
    if (credit_ != 0 && in_flight_ != 0 && in_flight_ + top.bytes > credit_) return std::nullopt;
    send_task t = top;
    queue_.pop();
    in_flight_ += t.bytes;
    return t;
  }

  void sent(std::size_t bytes) noexcept { in_flight_ -= bytes; }
  std::size_t queued() const noexcept { return queue_.size(); }
  std::size_t in_flight_bytes() const noexcept { return in_flight_; }
  std::size_t credit_bytes() const noexcept { return credit_; }

 private:
  struct goes_later {
    bool operator()(const send_task& a, const send_task& b) const noexcept {
      if (a.priority != b.priority) return a.priority < b.priority;
      if (a.order != b.order) return a.order > b.order;
      return a.part > b.part;
    }
  };
  std::priority_queue<send_task, std::vector<send_task>, goes_later> queue_;
  std::size_t credit_;
  std::size_t in_flight_ = 0;
};

static_assert(Scheduler<priority>);

}  // namespace bps::schedule
