#pragma once
/// @file
/// `bps::detail::held_memory`: anonymous shared memory (`memfd_create`) that its process holds
/// open and another process of the machine opens as `/proc/<pid>/fd/<fd>` (a server's buffer
/// pool, read by colocated workers through `transport::ipc`). It goes with the process, so a
/// crash leaves nothing in /dev/shm, and /dev/shm's size does not bound it. Both ends of the
/// path's format are here: `make` writes it, `is_held_path` and `is_held_memory` check it.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/core.h>

namespace bps::detail {

class held_memory {
 public:
  /// What `/proc/<pid>/fd/<fd>` of such memory links to: "/memfd:byteps-pool (deleted)".
  static constexpr std::string_view memfd_name = "byteps-pool";

  /// `bytes` of it, every page taken and mapped now; nothing (and `why` says what failed) when
  /// the memory cannot be had.
  static std::optional<held_memory> make(std::size_t bytes, std::string& why) {
    held_memory m;
    m.fd_ = ::memfd_create(std::string(memfd_name).c_str(), MFD_CLOEXEC);
    if (m.fd_ < 0) {
      why = fmt::format("memfd_create: {}", std::strerror(errno));
      return std::nullopt;
    }
    if (int rc = ::posix_fallocate(m.fd_, 0, static_cast<off_t>(bytes)); rc != 0) {
      why = fmt::format("posix_fallocate of {} bytes: {}", bytes, std::strerror(rc));
      return std::nullopt;
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, m.fd_, 0);
    if (p == MAP_FAILED) {
      why = fmt::format("mmap of {} bytes: {}", bytes, std::strerror(errno));
      return std::nullopt;
    }
    m.base_ = static_cast<std::byte*>(p);
    m.bytes_ = bytes;
    return m;
  }

  held_memory(held_memory&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)),
        base_(std::exchange(o.base_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  held_memory& operator=(held_memory&&) = delete;
  ~held_memory() {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    if (fd_ >= 0) ::close(fd_);
  }

  std::byte* data() const noexcept { return base_; }
  std::size_t size() const noexcept { return bytes_; }
  /// The path another process of this machine opens it by.
  std::string path() const { return fmt::format("/proc/{}/fd/{}", ::getpid(), fd_); }

  /// Whether `name` has the form of `path()`: `/proc/<digits>/fd/<digits>`, nothing else.
  static bool is_held_path(const std::string& name) {
    auto digits = [&](std::size_t from, std::size_t to) {
      return to > from && to - from <= 10 && name.find_first_not_of("0123456789", from) >= to;
    };
    if (!name.starts_with("/proc/") || name.size() > 64) return false;
    const auto fd_at = name.find("/fd/", 6);
    return fd_at != std::string::npos && digits(6, fd_at) && digits(fd_at + 4, name.size());
  }

  /// Whether descriptor `fd`, opened from a path of `is_held_path`'s form, is such memory: the
  /// pid in the path may name another process here (another pid namespace, a pid reused). Asks
  /// about the descriptor itself, not the path again, which could by then name something else.
  static bool is_held_memory(int fd) {
    char target[128];
    const std::string self = fmt::format("/proc/self/fd/{}", fd);
    const auto n = ::readlink(self.c_str(), target, sizeof target - 1);
    const std::string want = "/memfd:" + std::string(memfd_name) + " ";
    return n > 0 && std::string_view(target, static_cast<std::size_t>(n)).starts_with(want);
  }

 private:
  held_memory() = default;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace bps::detail
