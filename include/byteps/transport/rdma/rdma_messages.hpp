#pragma once
/// @file
/// The RDMA transport's own messages, carried by SEND in one receive slot each. Every one starts
/// with a 16-byte prefix (kind, credits returned, the frame's sequence number):
///
///   frame     prefix + 64-byte wire header + the whole payload (it fits the slot)
///   announce  prefix + 64-byte wire header: the payload follows by RDMA WRITE once granted
///   grant     prefix + offset, addr, rkey, flags, length, piece: write payload bytes
///             [offset, offset + length) to addr (rkey), in WRITE WITH IMM of at most `piece`;
///             flag `stays`: the whole payload's place for later frames of the same (key, part,
///             type, offset) too (the receiver's `destination_stays`), which the sender caches
///   credit    prefix only: returns receive credits when no other message carries them
///   direct    prefix + 64-byte wire header: the payload follows at once by WRITE WITH IMM into
///             the place a `stays` grant advertised for this frame's (key, part, type, offset),
///             whose first bytes it fills (a frame up to the advertised length may go there)
///   revoke    prefix + key, part, offset, type: forget that advertised place
///
/// A WRITE WITH IMM carries the frame's sequence number (low 32 bits) as its immediate. Fields
/// are little-endian (wire::detail::put_le), as the frame header is.

#include <atomic>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "byteps/wire/frame.hpp"

namespace bps::transport::rdma_msg {

enum class kind : std::uint8_t {
  frame = 1,
  announce = 2,
  grant = 3,
  credit = 4,
  direct = 5,
  revoke = 6
};

/// The kind's name, for messages ("announce").
constexpr const char* name(kind k) noexcept {
  switch (k) {
    case kind::frame: return "frame";
    case kind::announce: return "announce";
    case kind::grant: return "grant";
    case kind::credit: return "credit";
    case kind::direct: return "direct";
    case kind::revoke: return "revoke";
  }
  return "unknown";
}

inline constexpr std::size_t prefix_size = 16;
inline constexpr std::size_t grant_size = prefix_size + 40;
inline constexpr std::size_t revoke_size = prefix_size + 24;
inline constexpr std::uint32_t grant_stays = 1;  ///< grant::flags

/// Which frames an advertised place is for.
struct place_id {
  std::uint64_t key = 0;
  std::uint32_t part = 0;
  std::uint64_t offset = 0;
  std::uint16_t type = 0;
  static place_id of(const wire::header& h) noexcept {
    return {h.key, h.part, h.offset, static_cast<std::uint16_t>(h.type)};
  }
  friend auto operator<=>(const place_id&, const place_id&) = default;
};

struct prefix {
  kind k = kind::credit;
  std::uint32_t credits = 0;
  std::uint64_t seq = 0;
};

struct grant {
  std::uint64_t offset = 0;
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t flags = 0;
  std::uint64_t length = 0;
  std::uint64_t piece = 0;
};

inline void put_prefix(std::byte* out, const prefix& p) noexcept {
  out[0] = static_cast<std::byte>(p.k);
  out[1] = out[2] = out[3] = std::byte{0};
  wire::detail::put_le<std::uint32_t>(out + 4, p.credits);
  wire::detail::put_le<std::uint64_t>(out + 8, p.seq);
}

/// The prefix of a received message, or nullopt when it is too short or of no known kind.
inline std::optional<prefix> get_prefix(std::span<const std::byte> in) noexcept {
  if (in.size() < prefix_size) return std::nullopt;
  const auto k = static_cast<std::uint8_t>(in[0]);
  if (k < 1 || k > 6) return std::nullopt;
  return prefix{static_cast<kind>(k), wire::detail::get_le<std::uint32_t>(in.data() + 4),
                wire::detail::get_le<std::uint64_t>(in.data() + 8)};
}

inline void put_grant(std::byte* out, const grant& g) noexcept {
  auto* p = out + prefix_size;
  wire::detail::put_le<std::uint64_t>(p, g.offset);
  wire::detail::put_le<std::uint64_t>(p + 8, g.addr);
  wire::detail::put_le<std::uint32_t>(p + 16, g.rkey);
  wire::detail::put_le<std::uint32_t>(p + 20, g.flags);
  wire::detail::put_le<std::uint64_t>(p + 24, g.length);
  wire::detail::put_le<std::uint64_t>(p + 32, g.piece);
}

inline std::optional<grant> get_grant(std::span<const std::byte> in) noexcept {
  if (in.size() < grant_size) return std::nullopt;
  const auto* p = in.data() + prefix_size;
  return grant{
      wire::detail::get_le<std::uint64_t>(p),      wire::detail::get_le<std::uint64_t>(p + 8),
      wire::detail::get_le<std::uint32_t>(p + 16), wire::detail::get_le<std::uint32_t>(p + 20),
      wire::detail::get_le<std::uint64_t>(p + 24), wire::detail::get_le<std::uint64_t>(p + 32)};
}

inline void put_revoke(std::byte* out, const place_id& id) noexcept {
  auto* p = out + prefix_size;
  wire::detail::put_le<std::uint64_t>(p, id.key);
  wire::detail::put_le<std::uint32_t>(p + 8, id.part);
  wire::detail::put_le<std::uint32_t>(p + 12, id.type);
  wire::detail::put_le<std::uint64_t>(p + 16, id.offset);
}

inline std::optional<place_id> get_revoke(std::span<const std::byte> in) noexcept {
  if (in.size() < revoke_size) return std::nullopt;
  const auto* p = in.data() + prefix_size;
  return place_id{wire::detail::get_le<std::uint64_t>(p),
                  wire::detail::get_le<std::uint32_t>(p + 8),
                  wire::detail::get_le<std::uint64_t>(p + 16),
                  static_cast<std::uint16_t>(wire::detail::get_le<std::uint32_t>(p + 12))};
}

/// What a transport's links did, for tests and logs (basic_rdma::counters()): how payloads
/// travelled. Counted on the side named.
struct counters {
  std::uint64_t announced = 0;  ///< sender: large frames announced (a grant asked for)
  std::uint64_t cached = 0;     ///< sender: large frames sent `direct` to an advertised place
  std::uint64_t granted_in_place = 0;  ///< receiver: grants of the destination itself (registered)
  std::uint64_t granted_staged = 0;    ///< receiver: staging windows granted (unregistered)
  std::uint64_t advertised = 0;  ///< receiver: grants with `stays` (an (address, rkey) to cache)
  std::uint64_t moved = 0;       ///< receiver: direct frames whose place had moved (copied)
  std::uint64_t forgotten = 0;   ///< sender: advertised places it forgot on a revoke
  std::uint64_t writes_from_payload = 0;  ///< sender: writes straight from registered payload
  std::uint64_t writes_staged = 0;        ///< sender: writes copied through its staging area
};

/// Where links count (rdma_options::tally): any thread.
struct tally {
  std::atomic<std::uint64_t> announced{0}, cached{0}, granted_in_place{0}, granted_staged{0},
      advertised{0}, moved{0}, forgotten{0}, writes_from_payload{0}, writes_staged{0};
  counters snapshot() const {
    counters c;
    c.announced = announced.load();
    c.cached = cached.load();
    c.granted_in_place = granted_in_place.load();
    c.granted_staged = granted_staged.load();
    c.advertised = advertised.load();
    c.moved = moved.load();
    c.forgotten = forgotten.load();
    c.writes_from_payload = writes_from_payload.load();
    c.writes_staged = writes_staged.load();
    return c;
  }
};

/// What the two ends exchange in the connection manager's private data: a magic that says
/// "byteps rdma, this message format", and the sender's receive depth (its peer's credits).
inline constexpr std::uint32_t hello_magic = 0x31445242;  // "BRD1"
inline constexpr std::size_t hello_size = 8;

}  // namespace bps::transport::rdma_msg
