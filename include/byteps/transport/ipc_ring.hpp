#pragma once
/// @file
/// The pieces of `transport::ipc` (ipc.hpp) below its links: the transport-range frame types of
/// its handshake, the control block at the head of each shared-memory ring, the clean-up of
/// rings whose creator died before its peer mapped them, and the same-host test.

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <signal.h>
#include <sys/mman.h>

#include "byteps/wire/frame.hpp"

namespace bps::transport {

namespace ipc_detail {

inline constexpr auto ipc_able = static_cast<wire::msg>(0x110);
inline constexpr auto ipc_offer = static_cast<wire::msg>(0x111);
inline constexpr auto ipc_accept = static_cast<wire::msg>(0x112);
inline constexpr auto ipc_payload = static_cast<wire::msg>(0x113);

/// A single-producer single-consumer byte ring in shared memory. Positions grow for ever; a
/// payload never wraps (the producer skips to the start instead), and the consumer frees in
/// order by publishing how far it has read.
struct ring_control {
  std::atomic<std::uint64_t> consumed;
  std::byte pad[56];
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
