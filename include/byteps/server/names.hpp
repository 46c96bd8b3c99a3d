#pragma once
/// @file
/// The tensor names a server learned from `declare` frames, by key: its messages name tensors as
/// the user does, and two names that hash to one key are caught (their sums would mix).
///
/// @par Thread Safety
/// Safe to use from several threads at once (the I/O threads declare, the engines read).

#include <fmt/format.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace bps::server {

/// `part` value of an error that concerns a whole tensor rather than one partition.
inline constexpr std::uint32_t whole_tensor = 0xffffffffu;

class tensor_names {
 public:
  /// Records `name` for `key`. Returns the message for the worker when another name holds the
  /// key already.
  std::optional<std::string> declare(std::uint64_t key, const std::string& name) {
    std::lock_guard lock(mu_);
    auto [it, inserted] = names_.emplace(key, name);
    if (inserted || it->second == name) return std::nullopt;
    return fmt::format("tensor names '{}' and '{}' hash to the same key {:#x}; rename one of them",
                       it->second, name, key);
  }

  /// For messages: `'name'`, or `key 0x...` before it was declared.
  std::string quoted(std::uint64_t key) const {
    std::lock_guard lock(mu_);
    auto it = names_.find(key);
    return it != names_.end() ? "'" + it->second + "'" : fmt::format("key {:#x}", key);
  }

  /// For the timeline: `name`, or `key 0x...` before it was declared.
  std::string plain(std::uint64_t key) const {
    std::lock_guard lock(mu_);
    auto it = names_.find(key);
    return it != names_.end() ? it->second : fmt::format("key {:#x}", key);
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::string> names_;
};

}  // namespace bps::server
