#pragma once
/// @file
/// The pieces of `transport::ipc` (ipc.hpp) below its links: the transport-range frame types of
/// its handshake, the control block at the head of each shared-memory ring, the reading end of a
/// ring (whose payloads a receiver may hold and free in any order), the clean-up of rings whose
/// creator died before its peer mapped them, and the same-host test.

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include <signal.h>
#include <sys/mman.h>

#include "byteps/detail/shm_segment.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {

namespace ipc_detail {

inline constexpr auto ipc_able = static_cast<wire::msg>(0x110);
inline constexpr auto ipc_offer = static_cast<wire::msg>(0x111);
inline constexpr auto ipc_accept = static_cast<wire::msg>(0x112);
inline constexpr auto ipc_payload = static_cast<wire::msg>(0x113);

/// Where ring payloads start: a cache line, which every dtype's alignment divides.
inline constexpr std::uint64_t payload_alignment = 64;

constexpr std::uint64_t align_up(std::uint64_t n) noexcept {
  return (n + payload_alignment - 1) / payload_alignment * payload_alignment;
}

inline bool is_aligned(const std::byte* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % payload_alignment == 0;
}

/// A single-producer single-consumer byte ring in shared memory. Positions grow for ever; a
/// payload never wraps (the producer skips to the start instead), and the consumer publishes
/// how far the ring is free: everything before `consumed`.
struct alignas(64) ring_control {
  std::atomic<std::uint64_t> consumed;
  std::byte pad[56];
};
static_assert(sizeof(ring_control) % payload_alignment == 0);

/// The consumer's payloads still in use, so that they may be freed in any order while the ring
/// has one cursor: a server sums pushes where they lie, on its engine threads, and lets go of
/// each when its round is answered, not in the order they came. `consumed` moves over the
/// longest prefix of freed payloads, so one held payload keeps everything after it in use (the
/// producer then sends by its link what does not fit).
///
/// @par Thread Safety
/// `take` from the link's I/O thread, in ring order; `release` from any thread.
class ring_regions {
 public:
  /// The payload of `bytes` at ring position `pos` is in use. Positions only grow.
  void take(std::uint64_t pos, std::uint64_t bytes) {
    std::lock_guard lock(mu_);
    regions_.push_back({pos, pos + bytes, false});
  }

  /// Frees the payload taken at `pos`; publishes in `consumed` the end of the longest freed
  /// prefix when that moved (under the lock, so the cursor never goes back), and says whether
  /// it did. A position never taken, or freed already, changes nothing.
  bool release(std::uint64_t pos, std::atomic<std::uint64_t>& consumed) noexcept {
    std::lock_guard lock(mu_);
    auto it = std::lower_bound(regions_.begin(), regions_.end(), pos,
                               [](const region& r, std::uint64_t p) { return r.pos < p; });
    if (it == regions_.end() || it->pos != pos || it->released) return false;
    it->released = true;
    if (it != regions_.begin()) return false;
    std::uint64_t end = 0;
    while (!regions_.empty() && regions_.front().released) {
      end = regions_.front().end;
      regions_.pop_front();
    }
    consumed.store(end, std::memory_order_release);
    return true;
  }

  /// Payloads taken and not yet freed, or freed behind one that is not.
  std::size_t in_use() const {
    std::lock_guard lock(mu_);
    return regions_.size();
  }

 private:
  struct region {
    std::uint64_t pos, end;
    bool released;
  };
  mutable std::mutex mu_;
  std::deque<region> regions_;  // in ring order
};

/// The peer's ring as this end reads it, shared by the link and the payloads a receiver holds
/// in place, so the mapping outlives the link while any of them is still read.
struct ring_reader {
  ring_reader(detail::shm_segment s, std::uint64_t bytes)
      : segment(std::move(s)), capacity(bytes - sizeof(ring_control)) {}

  const std::byte* at(std::uint64_t pos) const noexcept {
    return segment.data() + sizeof(ring_control) + pos % capacity;
  }
  void release(std::uint64_t pos) noexcept {
    regions.release(pos, reinterpret_cast<ring_control*>(segment.data())->consumed);
  }

  detail::shm_segment segment;
  std::uint64_t capacity;
  ring_regions regions;
};

/// One payload held in place: its ring space is freed when the last copy of it goes.
struct ring_hold {
  ring_hold(std::shared_ptr<ring_reader> r, std::uint64_t p) : ring(std::move(r)), pos(p) {}
  ring_hold(const ring_hold&) = delete;
  ring_hold& operator=(const ring_hold&) = delete;
  ~ring_hold() { ring->release(pos); }

  std::shared_ptr<ring_reader> ring;
  std::uint64_t pos;
};

/// Removes rings whose creator is gone: a process killed between creating its ring and its
/// peer mapping it (the only moment a ring has a name) leaves `/dev/shm/bps-ipc-<pid>-...`.
/// Ring names start with the creator's pid, so any ipc transport on the machine can tell.
inline void remove_orphan_rings() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("bps-ipc-")) continue;
    const auto digits = name.substr(8, name.find('-', 8) - 8);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (::kill(pid, 0) != 0 && errno == ESRCH) ::shm_unlink(("/" + name).c_str());
  }
}

inline bool same_host(const std::string& peer, const std::string& local) {
  const auto colon = peer.rfind(':');
  const std::string host = peer.substr(0, colon);
  return host == local || host.starts_with("127.") || host == "::1" || host == "[::1]";
}

}  // namespace ipc_detail

}  // namespace bps::transport
