#pragma once
/// @file
/// `bps::schedule::fifo`: partitions go in the order push_pull was called, with no bound on the
/// bytes in flight (BytePS with scheduling off). The baseline the priority scheduler is
/// measured against.

#include <deque>
#include <optional>

#include "byteps/schedule/scheduler.hpp"

namespace bps::schedule {

class fifo {
 public:
  explicit fifo(const Config&) {}
  void push(const send_task& t) { queue_.push_back(t); }
  std::optional<send_task> pop() {
    if (queue_.empty()) return std::nullopt;
    send_task t = queue_.front();
    queue_.pop_front();
    in_flight_ += t.bytes;
    return t;
  }
  void sent(std::size_t bytes) noexcept { in_flight_ -= bytes; }
  std::size_t queued() const noexcept { return queue_.size(); }
  std::size_t in_flight_bytes() const noexcept { return in_flight_; }

 private:
  std::deque<send_task> queue_;
  std::size_t in_flight_ = 0;
};

static_assert(Scheduler<fifo>);

}  // namespace bps::schedule
