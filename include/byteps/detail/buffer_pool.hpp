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
/// With `share_from(min_bytes, f)`, buffers of at least `min_bytes` are made in anonymous shared
/// memory (`memfd_create`) that the pool holds open, and each is passed to `f` once with the
/// path another process of this machine opens it by (`/proc/<pid>/fd/<fd>`) and the mapping
/// (a server shares them with `transport::ipc`, so a colocated worker reads its sums where the
/// server wrote them). The pool keeps them while it lives; the memory goes with the process,
/// so a crash leaves nothing behind. Where such memory cannot be had, a buffer comes from the
/// heap and `f` is told why once (an empty mapping).

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/core.h>

namespace bps::detail {

/// The name of a pool's shared memory (`memfd_create`): what its `/proc/<pid>/fd/<fd>` links to
/// ("/memfd:byteps-pool (deleted)"), checked by a peer before it maps it.
inline constexpr const char* pool_memory_name = "byteps-pool";

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
  ~buffer_pool() {
    for (auto& m : shared_memory_) {
      ::munmap(m.base, m.bytes);
      ::close(m.fd);
    }
  }

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
    if (share_ && size >= share_min_)
      if (std::byte* p = make_shared(size)) return buffer{{p, release{false}}, size};
    buffer b{std::unique_ptr<std::byte[], release>(new std::byte[size]), size};
    if (on_new_) on_new_(b.span());
    return b;
  }

  /// Makes buffers of at least `min_bytes` in shared memory from now on and passes each to
  /// `f` (see the file comment). Call before the pool is shared with other threads.
  void share_from(std::size_t min_bytes, share_function f) {
    share_min_ = min_bytes;
    share_ = std::move(f);
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
  struct shared_block {
    int fd = -1;
    std::byte* base = nullptr;
    std::size_t bytes = 0;
  };

  // A buffer in anonymous shared memory, shared through share_; null (after telling share_
  // why, once) when the memory cannot be had.
  std::byte* make_shared(std::size_t size) {
    const int fd = ::memfd_create(pool_memory_name, MFD_CLOEXEC);
    std::string why;
    void* p = MAP_FAILED;
    if (fd < 0) {
      why = fmt::format("memfd_create: {}", std::strerror(errno));
    } else if (int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); rc != 0) {
      why = fmt::format("posix_fallocate of {} bytes: {}", size, std::strerror(rc));
    } else {
      p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) why = fmt::format("mmap of {} bytes: {}", size, std::strerror(errno));
    }
    if (p == MAP_FAILED) {
      if (fd >= 0) ::close(fd);
      std::lock_guard lock(mu_);
      if (!told_) share_(why, {});
      told_ = true;
      return nullptr;
    }
    auto* base = static_cast<std::byte*>(p);
    {
      std::lock_guard lock(mu_);
      shared_memory_.push_back({fd, base, size});
    }
    share_(fmt::format("/proc/{}/fd/{}", ::getpid(), fd), {base, size});
    return base;
  }

  static constexpr std::size_t max_free_per_size = 64;
  std::function<void(std::span<std::byte>)> on_new_;
  share_function share_;
  std::size_t share_min_ = 0;
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<buffer>> free_;
  std::vector<shared_block> shared_memory_;  // every block share_ was given, held to the end
  bool told_ = false;                        // share_ heard why the memory could not be had
};

}  // namespace bps::detail
