#pragma once
/// @file
/// The payload of a `declare` frame: what a worker tells a server about a tensor before its
/// first push there. The tensor's name (for messages, and to catch two names with one key) and,
/// for a compressor that the servers decode, its recipe's bytes (compress/recipe.hpp's byte
/// form, opaque here), so that workers and servers agree on each tensor's compressor when it is
/// declared, with no global barrier.
///
/// Little-endian (codec.hpp's strings: u32 length, then the bytes):
///   [u8 version = 1][string name (1 .. 4096 bytes)][string recipe (0 .. 16384 bytes; 0: none)]

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "byteps/wire/codec.hpp"

namespace bps::wire {

inline constexpr std::uint8_t declare_format_version = 1;
inline constexpr std::size_t max_tensor_name_bytes = 4096;
inline constexpr std::size_t max_recipe_bytes = 16384;
/// The largest `declare` payload a server reads.
inline constexpr std::size_t max_declare_bytes = 1 + 4 + max_tensor_name_bytes + 4 + max_recipe_bytes;

struct declaration {
  std::string name;
  std::vector<std::byte> recipe;  ///< empty: no compressor that the servers decode
};

inline std::vector<std::byte> encode_declare(const declaration& d) {
  byte_writer w;
  w.put<std::uint8_t>(declare_format_version);
  w.put_string(d.name);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(d.recipe.size()));
  w.bytes().insert(w.bytes().end(), d.recipe.begin(), d.recipe.end());
  return w.take();
}

/// Throws `decode_error` saying what is wrong for anything but `encode_declare`'s form.
inline declaration decode_declare(std::span<const std::byte> payload) {
  byte_reader in(payload);
  if (const auto v = in.get<std::uint8_t>(); v != declare_format_version)
    throw decode_error("declare format version " + std::to_string(v) + ", expected " +
                       std::to_string(declare_format_version));
  declaration d;
  d.name = in.get_string(max_tensor_name_bytes);
  if (d.name.empty()) throw decode_error("declare of an empty tensor name");
  // The recipe is a string field read as bytes: the same length-then-bytes form.
  const std::string recipe = in.get_string(max_recipe_bytes);
  const auto* p = reinterpret_cast<const std::byte*>(recipe.data());
  d.recipe.assign(p, p + recipe.size());
  if (!in.done()) throw decode_error("bytes after the declare's recipe");
  return d;
}

}  // namespace bps::wire
