#pragma once
/// @file
/// Reusable byte buffers, so that receiving a partition allocates nothing in steady state
/// (partitions mostly share one size, the partition bound).
///
/// With `keep_and_report(f)`, every buffer the pool allocates from then on is passed to `f` once
/// (a server registers it with an RDMA transport) and is never freed while the pool lives: a
/// registered buffer must stay put, so the pool then keeps every buffer given back (it holds at
/// most its peak use) instead of at most 64 of a size.
///
/// With `share_from(min_bytes, f)`, buffers of at least `min_bytes` are carved from slabs of
/// anonymous shared memory (`held_memory`: another process of this machine opens a slab as
/// `/proc/<pid>/fd/<fd>`), and each slab is passed to `f` once with that path and its mapping (a
/// server shares them with `transport::ipc`, so a colocated worker reads its sums where the
/// server wrote them). Slabs double from 4 MiB up to 256 MiB (a larger buffer gets one of its
/// own), so a server holds a few descriptors, not one per buffer. The pool keeps them while it
/// lives; the memory goes with the process. Where such memory cannot be had, a buffer comes from
/// the heap and `f` is told why once (an empty mapping).

#include <cstddef>
#include <functional>
#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "byteps/detail/held_memory.hpp"

namespace bps::detail {

/// Frees a pool buffer from the heap; leaves one in the pool's shared memory to the pool.
struct pool_release {
  bool heap = true;
  void operator()(std::byte* p) const noexcept {
    if (heap) delete[] p;
  }
};

class buffer_pool {
 public:
  using release = pool_release;
  struct buffer {
    std::unique_ptr<std::byte[], release> data;
    std::size_t size = 0;
    std::span<std::byte> span() const noexcept { return {data.get(), size}; }
    /// Whether it lies in the pool's shared memory (`share_from`).
    bool shared() const noexcept { return data && !data.get_deleter().heap; }
  };

  using share_function = std::function<void(const std::string& path, std::span<std::byte>)>;

  buffer_pool() = default;
  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;

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
    if (share_ && size >= share_min_ && (!share_wanted_ || share_wanted_()))
      if (std::byte* p = carve_shared(size)) return buffer{{p, release{false}}, size};
    buffer b{std::unique_ptr<std::byte[], release>(new std::byte[size]), size};
    if (on_new_) on_new_(b.span());
    return b;
  }

  /// Makes buffers of at least `min_bytes` in shared memory from now on, while `wanted` says so
  /// (always, without one), and passes each slab to `f` (see the file comment). Call before
  /// the pool is shared with other threads.
  void share_from(std::size_t min_bytes, share_function f, std::function<bool()> wanted = {}) {
    share_min_ = min_bytes;
    share_ = std::move(f);
    share_wanted_ = std::move(wanted);
  }

  /// Calls `f` with each buffer allocated from now on, and keeps every buffer given back. Call
  /// before the pool is shared with other threads.
  void keep_and_report(std::function<void(std::span<std::byte>)> f) { on_new_ = std::move(f); }

  void give_back(buffer b) {
    if (!b.data) return;
    std::lock_guard lock(mu_);
    auto& list = free_[b.size];
    if (on_new_ || b.shared() || list.size() < max_free_per_size) list.push_back(std::move(b));
  }

 private:
  static constexpr std::size_t first_slab = std::size_t{4} << 20;
  static constexpr std::size_t last_slab = std::size_t{256} << 20;
  static constexpr std::size_t carve_align = 4096;

  // `size` bytes of the current slab, or of a new one shared through share_; null (after telling
  // share_ why, once) when the memory cannot be had.
  std::byte* carve_shared(std::size_t size) {
    const std::size_t need = (size + carve_align - 1) / carve_align * carve_align;
    std::string path;
    std::span<std::byte> whole;
    {
      std::lock_guard lock(mu_);
      if (!slabs_.empty() && slabs_.back().size() - slab_used_ >= need) {
        std::byte* p = slabs_.back().data() + slab_used_;
        slab_used_ += need;
        return p;
      }
      const std::size_t next =
          slabs_.empty() ? first_slab : std::min(last_slab, 2 * slabs_.back().size());
      std::string why;
      auto fresh = held_memory::make(std::max(next, need), why);
      if (!fresh) {
        if (!told_) share_(why, {});
        told_ = true;
        return nullptr;
      }
      slabs_.push_back(std::move(*fresh));
      slab_used_ = need;
      path = slabs_.back().path();
      whole = {slabs_.back().data(), slabs_.back().size()};
    }
    // Until the transport has it, a payload in it is copied, as from any private buffer.
    share_(path, whole);
    return whole.data();
  }

  static constexpr std::size_t max_free_per_size = 64;
  std::function<void(std::span<std::byte>)> on_new_;
  share_function share_;
  std::function<bool()> share_wanted_;  // asked at each new buffer: share this one?
  std::size_t share_min_ = 0;
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<buffer>> free_;
  std::deque<held_memory> slabs_;  // every slab share_ was given, held to the end (stays put)
  std::size_t slab_used_ = 0;      // bytes of the last slab carved so far
  bool told_ = false;              // share_ heard why the memory could not be had
};

}  // namespace bps::detail
