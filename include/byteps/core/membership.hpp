#pragma once
/// @file
/// `bps::membership_event`: what a trainer learns at `Communicator::step_boundary()` when the
/// workers of an elastic job (`Config::elastic()`) changed since its last step: machines lost
/// or gone, and machines that joined (every worker sees a join at the same boundary).

#include <cstdint>
#include <string>
#include <vector>

namespace bps {

struct membership_event {
  std::uint64_t epoch = 0;   ///< membership changes since the job formed (the newest seen)
  int old_rank = 0;          ///< `rank()` before this event (-1 for the worker that joined)
  int old_size = 0;          ///< `size()` before this event (0 for the worker that joined)
  int rank = 0;              ///< this process among the worker processes now in the job
  int size = 0;              ///< the worker processes now in the job
  std::vector<int> removed;  ///< machines (DMLC_WORKER_ID) removed since the last event
  std::vector<int> joined;   ///< machines that joined since the last event (this one's own
                             ///< machine, for the worker that joined)
  std::string why;           ///< what happened to the last one removed
};

}  // namespace bps
