#pragma once
/// @file
/// `bps::partition::by_bytes`: BytePS's partitioner, with an automatic size by default. The split
/// depends on nothing that differs between machines (local collectives cut tensors into slices
/// before this runs), so every worker cuts a tensor the same way.
///
/// `BYTEPS_PARTITION_BYTES` set: partitions of that size, rounded up to a multiple of 4096, as in
/// BytePS; with several servers, a tensor that would make fewer than 4 partitions per server is
/// cut into up to 4 x `DMLC_NUM_SERVER` equal partitions of at least 64 KiB each (with one server
/// the split is BytePS's). Otherwise a 4 MB tensor is one partition on one server, whose link
/// then carries every worker's copy in and the sum out to every worker: far slower than with the
/// tensor spread over the servers (docs/performance.md, "Emulated, 1 Gbit/s links, fp32, byteps
/// defaults").
///
/// Unset (auto): the same split with 4096000 bytes, then, where that leaves fewer,
/// `auto_per_server` equal partitions per server, none under `auto_min_bytes`. A server answers
/// a partition when every worker's copy of it is in, so a large partition delays the first answer
/// and the last push of a tensor idles the links while it is summed: more, smaller partitions
/// keep every server's link busy (64 MiB on 4 servers: 64 partitions of 1 MiB instead of 17 of
/// 4 MB). The floor keeps the per-partition cost (frames, a sum, an answer) small against its
/// bytes: on loopback, where the CPU is the limit, small partitions lose (docs/performance.md,
/// "Partition size, and where the default lands", has the time against the partition size).
///
/// On one host, payloads through shared memory (`fit` with `job_shape::in_shared_memory`, auto
/// only), no tensor is spread in partitions under `auto_min_bytes`: a server then reads pushes
/// where they lie and answers by reference, so a partition's cost is its frames, wake-ups and
/// sum, not its bytes, and a 1 MiB tensor goes whole to one server. Over sockets on one host the
/// servers' copies are the cost, which the spread shares out (docs/performance.md, "One host,
/// payloads through shared memory: partitions of 1 MiB").

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
  static constexpr std::size_t auto_per_server = 16;
  static constexpr std::size_t auto_min_bytes = 1024 * 1024;

  explicit by_bytes(const Config& cfg)
      : unit_(page),
        bound_(round_up(cfg.largest_partition(), unit_)),
        servers_(static_cast<std::size_t>(cfg.num_servers)),
        spread_(servers_ > 1 ? parts_per_server * servers_ : 1),
        auto_(cfg.partition_bytes == 0) {}

  std::size_t bound() const noexcept { return bound_; }

  /// In shared memory with the automatic size, partitions of at least `auto_min_bytes`.
  void fit(const bps::job_shape& shape) noexcept {
    min_spread_ = shape.in_shared_memory && auto_ ? auto_min_bytes : min_spread_bytes;
  }

  /// What the scheduling credit counts in: auto, `auto_min_bytes`, the size large tensors are
  /// cut to (counted in `bound()`s the credit let 4 times as many partitions queue unsent, and
  /// each server waited on the slowest worker's copy: docs/performance.md has the runs); set,
  /// the partition size, as in BytePS.
  std::size_t credit_unit() const noexcept { return auto_ ? auto_min_bytes : bound_; }

  std::vector<bps::partition_range> split(std::size_t bytes, std::size_t element_size) const {
    std::vector<bps::partition_range> parts;
    if (bytes == 0) return parts;
    // unit_ and bound_ are multiples of 4096, so of every element size: parts never split an
    // element.
    (void)element_size;
    const std::size_t by_bound = (bytes + bound_ - 1) / bound_;
    std::size_t count = std::max(by_bound, std::min(spread_, bytes / min_spread_));
    if (auto_)
      count = std::max(count, std::min(auto_per_server * servers_, bytes / auto_min_bytes));
    const std::size_t size =
        count > by_bound ? round_up((bytes + count - 1) / count, unit_) : bound_;
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
  std::size_t servers_;
  std::size_t spread_;
  bool auto_;
  std::size_t min_spread_ = min_spread_bytes;
};

static_assert(Partitioner<by_bytes>);

}  // namespace bps::partition
