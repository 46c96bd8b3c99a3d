#pragma once
/// @file
/// Reusable byte buffers, so that receiving a partition allocates nothing in steady state
/// (partitions mostly share one size, the partition bound).

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace bps::detail {

class buffer_pool {
 public:
  struct buffer {
    std::unique_ptr<std::byte[]> data;
    std::size_t size = 0;
    std::span<std::byte> span() const noexcept { return {data.get(), size}; }
  };

  buffer take(std::size_t size) {
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        buffer b = std::move(it->second.back());
        it->second.pop_back();
        return b;
      }
    }
    return buffer{std::make_unique_for_overwrite<std::byte[]>(size), size};
  }

  void give_back(buffer b) {
    if (!b.data) return;
    std::lock_guard lock(mu_);
    auto& list = free_[b.size];
    if (list.size() < max_free_per_size) list.push_back(std::move(b));
  }

 private:
  static constexpr std::size_t max_free_per_size = 64;
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<buffer>> free_;
};

}  // namespace bps::detail
