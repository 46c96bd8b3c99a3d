#pragma once
/// @file
/// `bps::partition::by_bytes`: BytePS's partitioner. Partitions of `BYTEPS_PARTITION_BYTES`
/// (default 4096000), rounded up to a multiple of 4096. The split depends on nothing that
/// differs between machines (local collectives cut tensors into slices before this runs), so
/// every worker cuts a tensor the same way.
///
/// One change from BytePS: with several servers, a tensor that would make fewer than 4
/// partitions per server is cut into up to 4 x `DMLC_NUM_SERVER` equal partitions of at least
/// 64 KiB each (with one server the split is BytePS's). Otherwise a 4 MB
/// tensor is one partition on one server, whose link then carries every worker's copy in and
/// the sum out to every worker: measured on 4 workers + 4 servers at 1 Gbit/s, 8 times the
/// bound, against 1.4 times with the tensor spread (docs/performance.md).

#include <algorithm>
#include <cstddef>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/partition/partitioner.hpp"

namespace bps::partition {

class by_bytes {
 public:
  static constexpr std::size_t page = 4096;
  static constexpr std::size_t min_spread_bytes = 64 * 1024;
  static constexpr std::size_t parts_per_server = 4;

  explicit by_bytes(const Config& cfg)
      : unit_(page),
        bound_(round_up(cfg.partition_bytes, unit_)),
        spread_(cfg.num_servers > 1 ? parts_per_server * static_cast<std::size_t>(cfg.num_servers)
                                    : 1) {}

  std::size_t bound() const noexcept { return bound_; }

  std::vector<bps::partition_range> split(std::size_t bytes, std::size_t element_size) const {
    std::vector<bps::partition_range> parts;
    if (bytes == 0) return parts;
    // unit_ and bound_ are multiples of 4096, so of every element size: parts never split an
    // element.
    (void)element_size;
    std::size_t size = bound_;
    const std::size_t by_bound = (bytes + bound_ - 1) / bound_;
    const std::size_t spread = std::min(spread_, bytes / min_spread_bytes);
    if (spread > by_bound) size = round_up((bytes + spread - 1) / spread, unit_);
    parts.reserve((bytes + size - 1) / size);
    for (std::size_t offset = 0; offset < bytes; offset += size)
      parts.push_back({offset, std::min(size, bytes - offset)});
    return parts;
  }

 private:
  static std::size_t round_up(std::size_t bytes, std::size_t unit) noexcept {
    return (bytes + unit - 1) / unit * unit;
  }
  std::size_t unit_;
  std::size_t bound_;
  std::size_t spread_;
};

static_assert(Partitioner<by_bytes>);

}  // namespace bps::partition
