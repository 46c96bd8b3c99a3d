#pragma once
/// @file
/// `bps::stage`: the names of a worker's pipeline stages, one vocabulary for the worker's code,
/// the timeline's span names and `comm.stats()`. A partition of a push_pull passes through them
/// in this order:
///
///     local_reduce -> copy_out -> encode -> queue -> push -> pull -> decode -> copy_in
///       -> local_gather
///
/// `local_reduce` and `local_gather` run only with a local collective (several processes per
/// machine, or a device), `copy_out` and `copy_in` only where a device's memory must reach host
/// memory, `encode` and `decode` only with a compressor.

#include <cstddef>
#include <cstdint>

namespace bps {

enum class stage : std::uint8_t {
  local_reduce,  ///< the machine's sum of this partition, over its local ranks
  copy_out,      ///< device memory -> host memory
  encode,        ///< the compressor's encoding of the push
  queue,         ///< waiting for the scheduler (its order, credit)
  push,          ///< the payload to its server, until the transport let go of it
  pull,          ///< waiting for, then reading, the server's sum
  decode,        ///< the compressor's decoding of the sum
  copy_in,       ///< host memory -> device memory
  local_gather,  ///< the sum to every local rank's buffer
};

/// How many stages there are: arrays indexed by `stage` have this size.
inline constexpr std::size_t stage_count = static_cast<std::size_t>(stage::local_gather) + 1;

/// The stage's name as written above: in the timeline and in messages.
constexpr const char* stage_name(stage s) noexcept {
  switch (s) {
    case stage::local_reduce: return "local_reduce";
    case stage::copy_out: return "copy_out";
    case stage::encode: return "encode";
    case stage::queue: return "queue";
    case stage::push: return "push";
    case stage::pull: return "pull";
    case stage::decode: return "decode";
    case stage::copy_in: return "copy_in";
    case stage::local_gather: return "local_gather";
  }
  return "?";
}

}  // namespace bps
