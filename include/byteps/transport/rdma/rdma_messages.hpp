#pragma once
/// @file
/// The RDMA transport's own messages, carried by SEND in one receive slot each. Every one starts
/// with a 16-byte prefix (kind, credits returned, the frame's sequence number):
///
///   frame     prefix + 64-byte wire header + the whole payload (it fits the slot)
///   announce  prefix + 64-byte wire header: the payload follows by RDMA WRITE once granted
///   grant     prefix + offset, addr, rkey, length, piece: write payload bytes
///             [offset, offset + length) to addr (rkey), in WRITE WITH IMM of at most `piece`
///   credit    prefix only: returns receive credits when no other message carries them
///
/// A WRITE WITH IMM carries the frame's sequence number (low 32 bits) as its immediate. Fields
/// are little-endian (wire::detail::put_le), as the frame header is.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "byteps/wire/frame.hpp"

namespace bps::transport::rdma_msg {

enum class kind : std::uint8_t { frame = 1, announce = 2, grant = 3, credit = 4 };

inline constexpr std::size_t prefix_size = 16;
inline constexpr std::size_t grant_size = prefix_size + 40;

struct prefix {
  kind k = kind::credit;
  std::uint32_t credits = 0;
  std::uint64_t seq = 0;
};

struct grant {
  std::uint64_t offset = 0;
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
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
  if (k < 1 || k > 4) return std::nullopt;
  return prefix{static_cast<kind>(k), wire::detail::get_le<std::uint32_t>(in.data() + 4),
                wire::detail::get_le<std::uint64_t>(in.data() + 8)};
}

inline void put_grant(std::byte* out, const grant& g) noexcept {
  auto* p = out + prefix_size;
  wire::detail::put_le<std::uint64_t>(p, g.offset);
  wire::detail::put_le<std::uint64_t>(p + 8, g.addr);
  wire::detail::put_le<std::uint32_t>(p + 16, g.rkey);
  wire::detail::put_le<std::uint32_t>(p + 20, 0);
  wire::detail::put_le<std::uint64_t>(p + 24, g.length);
  wire::detail::put_le<std::uint64_t>(p + 32, g.piece);
}

inline std::optional<grant> get_grant(std::span<const std::byte> in) noexcept {
  if (in.size() < grant_size) return std::nullopt;
  const auto* p = in.data() + prefix_size;
  return grant{wire::detail::get_le<std::uint64_t>(p), wire::detail::get_le<std::uint64_t>(p + 8),
               wire::detail::get_le<std::uint32_t>(p + 16), wire::detail::get_le<std::uint64_t>(p + 24),
               wire::detail::get_le<std::uint64_t>(p + 32)};
}

/// What the two ends exchange in the connection manager's private data: a magic that says
/// "byteps rdma, this message format", and the sender's receive depth (its peer's credits).
inline constexpr std::uint32_t hello_magic = 0x31445242;  // "BRD1"
inline constexpr std::size_t hello_size = 8;

}  // namespace bps::transport::rdma_msg
