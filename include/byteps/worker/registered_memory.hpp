#pragma once
/// @file
/// `bps::worker::registered_memory`: the ranges a trainer registered with
/// `Communicator::register_memory`, so the worker can tell its transport that an answer's
/// destination inside one stays put (`transport::cached_destinations::destination_stays`): a tensor in
/// registered memory keeps its place, so RDMA caches where its answers go.
///
/// @par Thread Safety
/// Any thread; one mutex.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>

namespace bps::worker {

class registered_memory {
 public:
  void add(std::span<const std::byte> m) {
    if (m.empty()) return;
    std::lock_guard lock(mu_);
    auto& end = ranges_[address(m.data())];
    end = std::max(end, address(m.data()) + m.size());
  }

  /// True when all of `s` lies inside one registered range.
  bool contains(std::span<const std::byte> s) const {
    if (s.empty()) return false;
    std::lock_guard lock(mu_);
    const auto a = address(s.data());
    for (auto it = ranges_.upper_bound(a); it != ranges_.begin();) {
      --it;
      if (a + s.size() <= it->second) return true;
    }
    return false;
  }

 private:
  static std::uintptr_t address(const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p); }

  mutable std::mutex mu_;
  std::map<std::uintptr_t, std::uintptr_t> ranges_;  // start -> end
};

}  // namespace bps::worker
