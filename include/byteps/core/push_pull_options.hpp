#pragma once
/// @file
/// `bps::push_pull_options`: what a caller asks of one push_pull. Here rather than with the
/// communicator because the local collectives carry it too (`local::work`), and they sit
/// above the worker in the layer order.

#include <memory>

namespace bps {

namespace compress {
class spec;  // compress/compressor.hpp, above core in the layer order
}  // namespace compress

struct push_pull_options {
  /// Higher is sent first (give the first layers the highest) where the scheduler orders by
  /// priority: `BYTEPS_SCHEDULING_PRIORITY=1` (`Config::scheduling_by_priority`); else unused.
  int priority = 0;
  bool average = false;  ///< divide the sum by the number of workers (floating dtypes only)
  /// GPU local collectives only (`bps::local::nccl`): the `cudaStream_t` that produces the
  /// device buffer. The operation starts on the device after the work queued on this stream
  /// before the call; nullptr is the legacy default stream of the current device. Host
  /// policies ignore it. (A `void*` so that this header needs no CUDA.)
  void* stream = nullptr;
  /// How the tensor's partitions are encoded before the push and decoded after the pull:
  /// `bps::compress::use<C>(args...)` (compress/compressor.hpp). Null: sent as they are. A
  /// tensor keeps the compressor of its first use.
  std::shared_ptr<const compress::spec> compressor = nullptr;
};

}  // namespace bps
