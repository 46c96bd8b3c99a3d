#pragma once
/// @file
/// `bps::schedule::priority`: at most `BYTEPS_SCHEDULING_CREDIT` partitions' worth of bytes in
/// flight (0: no bound), a partition's worth being the partitioner's `credit_unit_of` (with
/// `partition::by_bytes`: 1 MiB in auto mode, else the partition size), which the communicator
/// passes in (`make_scheduler`); within the credit, partitions go in the order push_pull was
/// called (then lower partition index), or, with `BYTEPS_SCHEDULING_PRIORITY=1`, highest
/// `priority` first. The credit keeps the send queue short, so that the link is shared in the
/// chosen order rather than by whatever the sockets hold (ByteScheduler, SOSP'19).
///
/// Call order is the default because a synchronous server answers a partition only once every
/// worker's copy is in. Every worker calls push_pull in the same order, so in call order they
/// all send the same partition at about the same time; by priority, each worker's order
/// depends on which gradients its own backward pass has produced when its link frees up, and
/// the servers wait for the slowest worker's copy of each. Priorities pay off only where the
/// trainer uses a result before the others are back (the next forward pass waiting layer by
/// layer); a trainer that waits for every gradient before it steps gains nothing from them.

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
      : by_priority_(cfg.scheduling_by_priority),
        queue_(goes_later{by_priority_}),
        credit_(static_cast<std::size_t>(cfg.scheduling_credit) * partition_bytes) {}

  void push(const send_task& t) { queue_.push(t); }

  /// Whether partitions go highest priority first (else in call order).
  bool by_priority() const noexcept { return by_priority_; }

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
    bool by_priority = false;
    bool operator()(const send_task& a, const send_task& b) const noexcept {
      if (by_priority && a.priority != b.priority) return a.priority < b.priority;
      if (a.order != b.order) return a.order > b.order;
      return a.part > b.part;
    }
  };
  bool by_priority_;
  std::priority_queue<send_task, std::vector<send_task>, goes_later> queue_;
  std::size_t credit_;
  std::size_t in_flight_ = 0;
};

static_assert(Scheduler<priority>);

}  // namespace bps::schedule
