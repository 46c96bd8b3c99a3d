#pragma once
/// @file
/// Reusable byte buffers, so that receiving a partition allocates nothing in steady state
/// (partitions mostly share one size, the partition bound).
///
/// With `keep_and_report(f)`, every buffer the pool allocates from then on is passed to `f` once
/// (a server registers it with an RDMA transport) and is never freed while the pool lives: a
/// registered buffer must stay put, so the pool then keeps every buffer given back (it holds at
/// most its peak use) instead of at most 64 of a size.

#include <cstddef>
#include <functional>
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
    buffer b{std::make_unique_for_overwrite<std::byte[]>(size), size};
    if (on_new_) on_new_(b.span());
    return b;
  }

  /// Calls `f` with each buffer allocated from now on, and keeps every buffer given back. Call
  /// before the pool is shared with other threads.
  void keep_and_report(std::function<void(std::span<std::byte>)> f) { on_new_ = std::move(f); }

  void give_back(buffer b) {
    if (!b.data) return;
    std::lock_guard lock(mu_);
    auto& list = free_[b.size];
    if (on_new_ || list.size() < max_free_per_size) list.push_back(std::move(b));
  }

 private:
  static constexpr std::size_t max_free_per_size = 64;
  std::function<void(std::span<std::byte>)> on_new_;
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<buffer>> free_;
};

}  // namespace bps::detail
