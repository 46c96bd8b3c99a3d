#pragma once
/// @file
/// Keys: how a tensor name becomes a key, and how a partition's key picks its server.
///
/// A tensor's key is a 64-bit hash of its name, so every worker derives the same key whatever
/// order tensors first appear in, with no rendezvous per tensor (BytePS pays a global barrier per
/// tensor on first use). A partition is addressed by (tensor key, partition index): no 2^16 limit
/// on either. Servers detect two names that hash alike (the `declare` frame carries the name).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "byteps/core/config.hpp"

namespace bps {

/// FNV-1a, 64 bit: stable across builds and platforms, unlike std::hash.
constexpr std::uint64_t tensor_key(std::string_view name) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

/// One number per partition, the input of the key hash functions.
constexpr std::uint64_t partition_key(std::uint64_t tensor, std::uint32_t part) noexcept {
  return tensor ^ (static_cast<std::uint64_t>(part) * 0x9e3779b97f4a7c15ull);
}

/// One partition, as both roles address it: the server keeps its sum under it, the worker the
/// answer it awaits.
struct key_id {
  std::uint64_t key = 0;   ///< the tensor's key
  std::uint32_t part = 0;  ///< the partition's index within the tensor
  friend bool operator==(const key_id&, const key_id&) = default;
};

struct key_id_hash {
  std::size_t operator()(const key_id& k) const noexcept {
    return static_cast<std::size_t>(partition_key(k.key, k.part) * 0xff51afd7ed558ccdull >> 7);
  }
};

namespace detail {
// BytePS hashes the decimal text of the key; so do we, so that the spread is the same kind.
inline std::uint64_t hash_key_text(std::uint64_t key, key_hash_fn fn) {
  char text[24];
  int n = 0;
  do {
    text[n++] = static_cast<char>('0' + key % 10);
    key /= 10;
  } while (key != 0);
  std::uint64_t h = fn == key_hash_fn::djb2 ? 5381 : 0;
  for (int i = n - 1; i >= 0; --i) {
    auto c = static_cast<std::uint64_t>(static_cast<unsigned char>(text[i]));
    h = fn == key_hash_fn::djb2 ? ((h << 5) + h) + c : c + (h << 6) + (h << 16) - h;
  }
  return h;
}
}  // namespace detail

/// The tensor's hash under BYTEPS_KEY_HASH_FN: where its partitions start among the servers.
inline std::uint64_t key_hash(std::uint64_t tensor, key_hash_fn fn) {
  switch (fn) {
    case key_hash_fn::djb2:
    case key_hash_fn::sdbm:
      return detail::hash_key_text(tensor, fn);
    case key_hash_fn::naive:
      return (tensor >> 16) + tensor;
    case key_hash_fn::built_in:
      return std::hash<std::uint64_t>{}(tensor);  // only as stable as the standard library in use
  }
  return 0;
}

/// The server (0 .. num_servers-1) that owns a partition. The hash picks the server of a
/// tensor's first partition; the next partitions go to the next servers in turn. Hashing every
/// partition on its own (as BytePS does) leaves servers unevenly loaded, and the busiest server
/// bounds the push_pull time (docs/performance.md, "Placing partitions on servers").
inline int server_for(std::uint64_t tensor, std::uint32_t part, int num_servers,
                      key_hash_fn fn) {
  const auto n = static_cast<std::uint64_t>(num_servers);
  return static_cast<int>((key_hash(tensor, fn) % n + part % n) % n);
}

}  // namespace bps
