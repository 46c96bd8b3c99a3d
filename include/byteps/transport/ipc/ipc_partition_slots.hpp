#pragma once
/// @file
/// `transport::ipc_detail::partition_slots`: a worker's own memory for each partition it pushes
/// to a server on its host (`ipc<Inner>::link::send_partition`), carved from slabs of anonymous
/// shared memory (`detail::held_memory`) that the transport shares by name. The push is copied
/// into its slot and goes by reference: the one copy a push through the ring takes too, without
/// the ring's limit. A push the server reads in place holds its ring space until its round is
/// summed, so a worker ahead of the others filled its ring and sent the rest by TCP, copied by
/// the kernel on both sides. A slot is used again by its partition's next push, which the
/// worker sends only after the server answered this one, when the server no longer reads it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/detail/held_memory.hpp"

namespace bps::transport::ipc_detail {

/// @par Thread Safety
/// Every member may be called from any thread.
class partition_slots {
 public:
  /// Slabs are this large, or as large as a partition that does not fit one.
  static constexpr std::size_t slab_bytes = std::size_t{32} << 20;
  /// Slots start on a page, so a server summing a push in place reads every dtype aligned.
  static constexpr std::size_t slot_alignment = 4096;

  /// Partition (key, part)'s slot if it was made and holds `bytes`, else an empty span.
  std::span<std::byte> find(std::uint64_t key, std::uint32_t part, std::size_t bytes) const {
    std::lock_guard lock(mu_);
    auto it = slots_.find({key, part});
    if (it == slots_.end() || it->second.size() < bytes) return {};
    return it->second.first(bytes);
  }

  /// Whether `make` for partition (key, part) could do anything: it has no slot yet, and
  /// memory was not refused before.
  bool could_make(std::uint64_t key, std::uint32_t part) const {
    std::lock_guard lock(mu_);
    return !failed_ && !slots_.contains({key, part});
  }

  /// Makes partition (key, part)'s slot of `bytes` unless it has one; a new slab goes to
  /// `share(path, memory)` first. Does nothing once memory could not be had: the pushes keep
  /// the ring. Returns whether the partition has a slot of at least `bytes` now.
  template <class Share>
  bool make(std::uint64_t key, std::uint32_t part, std::size_t bytes, Share&& share) {
    std::lock_guard lock(mu_);
    if (auto it = slots_.find({key, part}); it != slots_.end()) return it->second.size() >= bytes;
    if (failed_ || bytes == 0) return false;
    const std::size_t size = (bytes + slot_alignment - 1) / slot_alignment * slot_alignment;
    if (slabs_.empty() || used_ + size > slabs_.back().size()) {
      std::string why;
      auto slab = detail::held_memory::make(std::max(slab_bytes, size), why);
      if (!slab) {
        failed_ = true;
        return false;
      }
      slabs_.push_back(std::move(*slab));
      used_ = 0;
      share(slabs_.back().path(), std::span(slabs_.back().data(), slabs_.back().size()));
    }
    std::span<std::byte> memory(slabs_.back().data() + used_, size);
    used_ += size;
    slots_.emplace(std::pair{key, part}, memory);
    return true;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::span<std::byte>> slots_;
  std::vector<detail::held_memory> slabs_;
  std::size_t used_ = 0;  // bytes of the last slab carved
  bool failed_ = false;
};

}  // namespace bps::transport::ipc_detail
