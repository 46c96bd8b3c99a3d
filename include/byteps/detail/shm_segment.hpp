#pragma once
/// @file
/// `bps::detail::shm_segment`: a named POSIX shared-memory segment that several processes of one
/// machine map: the local ranks of `local::host` and `local::nccl`, or a worker and the server
/// colocated with it (`transport::ipc`'s rings). The first process to open a name creates it,
/// the others check that it was made for the same thing, and the name goes as soon as every user
/// mapped it, so a crash later leaves nothing in /dev/shm. Its messages speak of local ranks and
/// tensors, the users it was first written for.

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::detail {

/// The start of every segment: who may use it and how many of its users have mapped it. A whole
/// cache line, so what follows starts on one (ipc rings hand payloads over in place).
struct alignas(64) segment_header {
  static constexpr std::uint64_t ready_magic = 0x62797465'70732d31ull;  // "byteps-1"
  std::atomic<std::uint64_t> magic;                                     ///< set last by the creator
  std::uint64_t bytes;                                                  ///< the whole segment
  std::uint64_t fingerprint;          ///< what the creator meant it for (shape, dtype)
  std::atomic<std::uint32_t> mapped;  ///< users that mapped it; the last one unlinks
  std::uint32_t users;                ///< processes that will map it
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

/// A mapped segment. The first process to open a name creates it; the others wait (until
/// `deadline`) for the creator to finish, then check that it was made for the same thing
/// (`fingerprint`, `bytes`) and throw `usage_error` when it was not. The name is unlinked as
/// soon as all `users` have mapped it, so a crash later leaves nothing in /dev/shm. With
/// `users` 0 the name stays until `unlink()`: for a segment that processes other than its
/// users may map by name later (`local::host`'s, which a colocated server reads in place).
class shm_segment {
 public:
  using clock = std::chrono::steady_clock;

  shm_segment() = default;
  BYTEPS_DECL shm_segment(std::string name, std::size_t bytes, std::uint64_t fingerprint, int users,
                          clock::time_point deadline, const std::string& what);
  shm_segment(shm_segment&& o) noexcept { *this = std::move(o); }
  shm_segment& operator=(shm_segment&& o) noexcept {
    if (this != &o) {
      release();
      name_ = std::move(o.name_);
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      unlinked_ = o.unlinked_;
    }
    return *this;
  }
  ~shm_segment() { release(); }

  /// The bytes after the header.
  std::byte* data() const noexcept { return base_ + sizeof(segment_header); }
  /// The whole mapping, header included: what a process mapping the name sees from offset 0.
  std::span<std::byte> whole() const noexcept { return {base_, bytes_}; }
  const std::string& name() const noexcept { return name_; }
  bool mapped() const noexcept { return base_ != nullptr; }

  /// Removes the name now (a job ending early: not every user will come to map it).
  void unlink() noexcept {
    if (!unlinked_ && !name_.empty()) ::shm_unlink(name_.c_str());
    unlinked_ = true;
  }

 private:
  segment_header* header() const noexcept { return reinterpret_cast<segment_header*>(base_); }

  void wait_for_size(int fd, std::size_t bytes, clock::time_point deadline,
                     const std::string& what) {
    for (;;) {
      struct stat st {};
      if (::fstat(fd, &st) != 0) {
        ::close(fd);
        throw system_failure(what, "fstat");
      }
      if (st.st_size != 0) {
        if (static_cast<std::size_t>(st.st_size) != bytes) {
          ::close(fd);
          throw usage_error(fmt::format(
              "{}: another local rank of this machine uses this tensor "
              "with a different shape or dtype (shared memory {} holds "
              "{} bytes, this rank needs {})",
              what, name_, st.st_size - sizeof(segment_header), bytes - sizeof(segment_header)));
        }
        return;
      }
      if (clock::now() > deadline) {
        ::close(fd);
        throw communicator_error(
            fmt::format("{}: shared memory {} was never sized by the local "
                        "rank that created it",
                        what, name_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  communicator_error system_failure(const std::string& what, const char* call) const {
    return communicator_error(fmt::format("{}: {} of shared memory {} failed: {}", what, call,
                                          name_, std::strerror(errno)));
  }

  void release() noexcept {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = nullptr;
    bytes_ = 0;
  }

  std::string name_;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  bool unlinked_ = false;
};

}  // namespace bps::detail

#if BYTEPS_INCLUDE_BODIES
#include "byteps/detail/impl/shm_segment.hpp"
#endif
