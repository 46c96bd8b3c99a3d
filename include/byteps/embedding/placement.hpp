#pragma once
/// @file
/// Where a table's rows live and how they start. A row belongs to the server its id hashes to
/// (a 64-bit mix of the id and the table's key, modulo the servers): ids drawn from a skewed
/// distribution are hottest at the small ids, and ranges would put all of those on server 0,
/// while the hash spreads them. A row's initial values are a function of the table's seed, the
/// id and the column alone, so a server can create a row the first time it is touched, in any
/// order, and a reference can compute it without any server.

#include <cstdint>
#include <string_view>

#include "byteps/core/keys.hpp"

namespace bps::embedding {

/// splitmix64's finaliser: every input bit moves every output bit.
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The key a table's frames carry: its name's hash, moved away from the dense tensor of the same
/// name, which may exist too.
constexpr std::uint64_t table_key(std::string_view name) noexcept {
  return mix(tensor_key(name) ^ 0x7461626c655f6b79ull);
}

/// The server (0 .. servers-1) that holds row `id` of the table with key `key`.
constexpr int row_server(std::uint64_t key, std::uint64_t id, int servers) noexcept {
  return servers <= 1 ? 0 : static_cast<int>(mix(id ^ key) % static_cast<std::uint64_t>(servers));
}

/// Element `column` of row `id`'s initial value: uniform in [-scale, scale), from 24 random bits.
inline float initial_value(std::uint64_t seed, std::uint64_t id, std::uint32_t column,
                           double scale) noexcept {
  const std::uint64_t bits = mix(mix(seed ^ mix(id)) + column) >> 40;  // 24 bits
  const double unit = static_cast<double>(bits) / static_cast<double>(1u << 24);  // [0, 1)
  return static_cast<float>((2.0 * unit - 1.0) * scale);
}

}  // namespace bps::embedding
