#pragma once
/// @file
/// `bps::transport::rdma_registry<V>`: the memory an owner registered explicitly with
/// `register_memory`, as an interval map from address ranges to their memory region. A payload
/// or a destination inside one registered range goes straight to or from the NIC; anything else
/// is copied through a link's staging area. Nothing is registered behind the owner's back and
/// nothing is keyed by a pointer that may be freed and reused: a range stays registered until
/// the transport stops, so an owner registers only memory that outlives the transport (a
/// server's partition buffers, a trainer's gradient arena, local::nccl's pinned buffer).

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>

#include "byteps/transport/rdma/verbs.hpp"

namespace bps::transport {

template <class V>
class rdma_registry {
 public:
  struct keys {
    std::uint32_t lkey = 0;
    std::uint32_t rkey = 0;
  };

  rdma_registry(V& verbs, typename V::device* dev) : v_(verbs), dev_(dev) {}
  rdma_registry(const rdma_registry&) = delete;
  rdma_registry& operator=(const rdma_registry&) = delete;
  ~rdma_registry() { clear(); }

  /// Registers `memory` once; a range already inside a registered one costs nothing. Throws
  /// what `reg_mr` throws (a memlock limit names RLIMIT_MEMLOCK).
  ///
  /// Access: remote write (and the local write verbs requires with it), because peers write
  /// frames straight into it; sending from it needs no flag. Not remote read: nothing issues an
  /// RDMA READ, and with it any peer given the rkey could read the whole region.
  void add(std::span<std::byte> memory) {
    if (memory.empty()) return;
    std::lock_guard lock(mu_);
    if (find(memory.data(), memory.size())) return;
    auto* mr = v_.reg_mr(dev_, memory, verbs::local_write | verbs::remote_write);
    ranges_[address(memory.data())] = {address(memory.data()) + memory.size(), mr};
  }

  /// The keys of a registered range holding all of [p, p + n), if there is one.
  std::optional<keys> lookup(const std::byte* p, std::size_t n) const {
    std::lock_guard lock(mu_);
    if (auto* r = find(p, n)) return keys{v_.lkey(r->mr), v_.rkey(r->mr)};
    return std::nullopt;
  }

  void clear() {
    std::lock_guard lock(mu_);
    for (auto& [start, r] : ranges_) v_.dereg_mr(r.mr);
    ranges_.clear();
  }

 private:
  struct range {
    std::uintptr_t end = 0;
    typename V::mr* mr = nullptr;
  };
  static std::uintptr_t address(const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p); }

  // Ranges may overlap (a buffer registered, then a larger one around it): look at every range
  // that starts at or before p; there are few.
  const range* find(const std::byte* p, std::size_t n) const {
    const auto a = address(p);
    for (auto it = ranges_.upper_bound(a); it != ranges_.begin();) {
      --it;
      if (a + n <= it->second.end) return &it->second;
    }
    return nullptr;
  }

  V& v_;
  typename V::device* dev_;
  mutable std::mutex mu_;
  std::map<std::uintptr_t, range> ranges_;
};

}  // namespace bps::transport
