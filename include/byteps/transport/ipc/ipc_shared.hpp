#pragma once
/// @file
/// The pieces of `transport::ipc` (ipc.hpp) that send payloads by reference: memory this process
/// shares by name (`ipc::share_memory`, the worker's `local::host` segments), the frames that
/// name it to the peer (`ipc_share`, `ipc_share_accept`, `ipc_shared_payload`: their payloads
/// are in ipc_messages.hpp), and the peer's read-only mapping of it. A payload that lies in such
/// memory goes as its place in it, with no copy into the ring, once the peer mapped the name.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/core.h>

#include "byteps/detail/held_memory.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport::ipc_detail {

inline constexpr auto ipc_share = static_cast<wire::msg>(0x114);
inline constexpr auto ipc_share_accept = static_cast<wire::msg>(0x115);
inline constexpr auto ipc_shared_payload = static_cast<wire::msg>(0x116);

/// Where a payload lies in a shared region.
struct shared_place {
  std::uint32_t id = 0;
  std::uint64_t offset = 0;
};

/// The memory this process shares by name, found by address.
///
/// @par Thread Safety
/// Every member may be called from any thread.
class shared_regions {
 public:
  struct named {
    std::string name;
    std::uint64_t bytes = 0;
  };

  /// `memory` maps segment `name` from offset 0; an empty `memory` withdraws the name.
  void share(const std::string& name, std::span<std::byte> memory) {
    std::lock_guard lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();)
      it = it->second.name == name ? regions_.erase(it) : std::next(it);
    if (!memory.empty())  // a mapping at the same address replaces one never withdrawn
      regions_.insert_or_assign(address(memory.data()), region{next_id_++, name, memory.size()});
    any_ = !regions_.empty();
  }

  /// The region `payload` lies in, whole, and where in it.
  std::optional<shared_place> find(std::span<const std::byte> payload) const {
    if (!any_.load(std::memory_order_relaxed)) return std::nullopt;
    const auto at = address(payload.data());
    std::lock_guard lock(mu_);
    auto it = regions_.upper_bound(at);
    if (it == regions_.begin()) return std::nullopt;
    --it;
    const auto offset = at - it->first;
    if (offset + payload.size() > it->second.bytes) return std::nullopt;
    return shared_place{it->second.id, offset};
  }

  /// The name and size of region `id`, or nothing once it was withdrawn.
  std::optional<named> name_of(std::uint32_t id) const {
    std::lock_guard lock(mu_);
    for (const auto& [base, r] : regions_)
      if (r.id == id) return named{r.name, r.bytes};
    return std::nullopt;
  }

 private:
  struct region {
    std::uint32_t id;
    std::string name;
    std::uint64_t bytes;
  };
  static std::uintptr_t address(const std::byte* p) noexcept {
    return reinterpret_cast<std::uintptr_t>(p);
  }

  mutable std::mutex mu_;
  std::map<std::uintptr_t, region> regions_;  // by base address
  std::uint32_t next_id_ = 1;
  std::atomic<bool> any_{false};  // spares the lock to every send while nothing is shared
};

/// A peer's shared region, mapped read-only by name. Shared with the payloads a receiver holds
/// in place, so the mapping outlives the link while any of them is still read.
class shared_mapping {
 public:
  /// Maps `name`, which must hold at least `bytes`: a byteps segment (`/bps-...`), or an
  /// anonymous one the peer holds open (`/proc/<pid>/fd/<fd>`, a server's pool: it vanishes with
  /// the process, so a crash leaves nothing behind). Throws `std::runtime_error` saying why it
  /// cannot.
  shared_mapping(const std::string& name, std::uint64_t bytes) {
    const bool held = detail::held_memory::is_held_path(name);
    if (!held &&
        (!name.starts_with("/bps-") || name.find('/', 1) != std::string::npos || name.size() > 200))
      throw std::runtime_error(fmt::format("'{}' is not a byteps shared-memory name", name));
    const int fd =
        held ? ::open(name.c_str(), O_RDONLY | O_CLOEXEC) : ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) throw failure(name, held ? "open" : "shm_open");
    // The peer's pid may mean another process here (another pid namespace, a pid reused): map
    // only a byteps pool's memory.
    if (held && !detail::held_memory::is_held_memory(fd)) {
      ::close(fd);
      throw std::runtime_error(
          fmt::format("{} is not a byteps pool's shared memory in this process's view", name));
    }
    struct stat st{};
    if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < bytes) {
      ::close(fd);
      throw std::runtime_error(fmt::format("shared memory {} is smaller than the {} bytes its "
                                           "peer shared",
                                           name, bytes));
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw failure(name, "mmap");
    base_ = static_cast<const std::byte*>(p);
    bytes_ = bytes;
  }
  shared_mapping(const shared_mapping&) = delete;
  shared_mapping& operator=(const shared_mapping&) = delete;
  ~shared_mapping() { ::munmap(const_cast<std::byte*>(base_), bytes_); }

  /// The `bytes` at `offset`, or an empty span when they are not all inside.
  std::span<const std::byte> at(std::uint64_t offset, std::uint64_t bytes) const noexcept {
    if (offset > bytes_ || bytes > bytes_ - offset) return {};
    return {base_ + offset, bytes};
  }

 private:
  static std::runtime_error failure(const std::string& name, const char* call) {
    return std::runtime_error(
        fmt::format("{} of shared memory {} failed: {}", call, name, std::strerror(errno)));
  }

  const std::byte* base_ = nullptr;
  std::uint64_t bytes_ = 0;
};

}  // namespace bps::transport::ipc_detail
