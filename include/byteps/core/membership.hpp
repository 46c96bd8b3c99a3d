#pragma once
/// @file
/// `bps::membership_event`: what a trainer learns at `Communicator::step_boundary()` when the
/// workers of an elastic job (`Config::elastic()`) changed since its last step.

#include <cstdint>
#include <string>
#include <vector>

namespace bps {

struct membership_event {
  std::uint64_t epoch = 0;   ///< membership changes since the job formed (the newest seen)
  int old_rank = 0;          ///< `rank()` before this event
  int old_size = 0;          ///< `size()` before this event
  int rank = 0;              ///< this process among the worker processes still in the job
  int size = 0;              ///< the worker processes still in the job
  std::vector<int> removed;  ///< machines (DMLC_WORKER_ID) removed since the last event
  std::string why;           ///< what happened to the last one removed
};

}  // namespace bps
