#pragma once
/// @file
/// `bps::partition::by_bytes`: BytePS's partitioner. Partitions of `BYTEPS_PARTITION_BYTES`
/// (default 4096000), rounded up to a multiple of local_size x 4096 so that each local rank's
/// slice of a partition is page aligned (the local reduce-scatter splits partitions that way).

#include <cstddef>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/partition/partitioner.hpp"

namespace bps::partition {

class by_bytes {
 public:
  static constexpr std::size_t page = 4096;

  explicit by_bytes(const Config& cfg) : bound_(round_up(cfg.partition_bytes, cfg.local_size)) {}

  std::size_t bound() const noexcept { return bound_; }

  std::vector<bps::partition_range> split(std::size_t bytes, std::size_t element_size) const {
    std::vector<bps::partition_range> parts;
    if (bytes == 0) return parts;
    parts.reserve((bytes + bound_ - 1) / bound_);
    // bound_ is a multiple of 4096, so of every element size; parts never split an element.
    (void)element_size;
    for (std::size_t offset = 0; offset < bytes; offset += bound_)
      parts.push_back({offset, std::min(bound_, bytes - offset)});
    return parts;
  }

 private:
  static std::size_t round_up(std::size_t bytes, int local_size) noexcept {
    const std::size_t unit = page * static_cast<std::size_t>(local_size);
    return (bytes + unit - 1) / unit * unit;
  }
  std::size_t bound_;
};

static_assert(Partitioner<by_bytes>);

}  // namespace bps::partition
