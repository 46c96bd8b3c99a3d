#pragma once
/// @file
/// The tensor names a server learned from `declare` frames, by key: its messages name tensors as
/// the user does, and two names that hash to one key are caught (their sums would mix). Beside
/// each name, the recipe of the compressor its workers declared, if the servers decode it, and
/// how to make the server's compressor from it (server/decoding.hpp): the first declare fixes
/// it, and a later one with another recipe (or none where there is one) is refused naming both.
///
/// @par Thread Safety
/// Safe to use from several threads at once (the I/O threads declare, the engines read).

#include <fmt/core.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "byteps/compress/recipe.hpp"
#include "byteps/compress/registry.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/core/log.hpp"
#include "byteps/wire/declare.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

/// `part` value of an error that concerns a whole tensor rather than one partition.
inline constexpr std::uint32_t whole_tensor = 0xffffffffu;

class tensor_names {
 public:
  /// A declared name has at most `max_name_bytes` bytes, and at most `max_tensors` keys are
  /// held (BYTEPS_MAX_NAME_BYTES, BYTEPS_MAX_TENSORS): a declare past either is refused, and
  /// counted (`refused_for_limits`). Unlimited until set.
  void set_limits(std::size_t max_name_bytes, std::size_t max_tensors) {
    std::lock_guard lock(mu_);
    max_name_bytes_ = max_name_bytes;
    max_tensors_ = max_tensors;
  }
  /// Declares refused by the limits so far.
  std::uint64_t refused_for_limits() const {
    std::lock_guard lock(mu_);
    return refused_for_limits_;
  }

  /// Records `name` for `key`, with the `recipe` worker `worker` declared it with (none: no
  /// compressor that servers decode). Returns the message for the worker when another name
  /// holds the key, when `reg` cannot make the server's compressor of `recipe`, or when the
  /// key was declared with another recipe.
  BYTEPS_DECL std::optional<std::string> declare(std::uint64_t key, const std::string& name,
                                                 const std::optional<compress::recipe>& recipe,
                                                 const compress::registry& reg, int worker);

  /// `declare` of a declare frame's payload, whose recipe bytes may be malformed.
  BYTEPS_DECL std::optional<std::string> declare(std::uint64_t key, const wire::declaration& d,
                                                 const compress::registry& reg, int worker);

  /// How to make the server compressor of `key`; null when it was declared without one (or
  /// not declared).
  std::shared_ptr<const compress::spec> codec(std::uint64_t key) const {
    std::lock_guard lock(mu_);
    auto it = names_.find(key);
    return it == names_.end() ? nullptr : it->second.codec;
  }

  /// For messages: `'name'`, or `key 0x...` before it was declared.
  std::string quoted(std::uint64_t key) const {
    std::lock_guard lock(mu_);
    auto it = names_.find(key);
    return it != names_.end() ? "'" + it->second.name + "'" : fmt::format("key {:#x}", key);
  }

  /// For the timeline: `name`, or `key 0x...` before it was declared.
  std::string plain(std::uint64_t key) const {
    std::lock_guard lock(mu_);
    auto it = names_.find(key);
    return it != names_.end() ? it->second.name : fmt::format("key {:#x}", key);
  }

 private:
  struct entry {
    std::string name;
    std::optional<compress::recipe> recipe;
    std::shared_ptr<const compress::spec> codec;  // from for_server(recipe); null without
  };
  BYTEPS_DECL static std::string describe(const std::optional<compress::recipe>& r);

  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, entry> names_;
  std::size_t max_name_bytes_ = static_cast<std::size_t>(-1);
  std::size_t max_tensors_ = static_cast<std::size_t>(-1);
  std::uint64_t refused_for_limits_ = 0;
};

/// A server's `declare` frame from session `s` (session.hpp): recorded in `names`, or refused
/// with a usage error to that worker, whose pushes of the tensor the session refuses from then
/// on (they cannot be summed with the others'). A malformed payload throws: the link closes, as
/// for any malformed control frame.
template <class Session>
void take_declare(tensor_names& names, Session& s, std::uint64_t key,
                  std::span<const std::byte> payload, const compress::registry& reg, logger& log) {
  wire::declaration d;
  try {
    d = wire::decode_declare(payload);
  } catch (const wire::decode_error& e) {
    throw wire::decode_error(fmt::format("malformed declare: {}", e.what()));
  }
  const auto problem = names.declare(key, d, reg, s.worker);
  if (!problem) return;
  log.warn("refused {}'s declare: {}", s.describe(), *problem);
  wire::header h;
  h.key = key;
  h.part = whole_tensor;
  s.send_error(h, *problem, wire::flag_usage);
  s.refuse_key(key, fmt::format("push of tensor '{}' refused: this worker's declare of it was "
                                "refused ({})",
                                d.name, *problem));
}

}  // namespace bps::server

#if BYTEPS_INCLUDE_BODIES
#include "byteps/server/impl/names.hpp"
#endif
