#pragma once
/// @file
/// The fault plan of `bps::transport::faulty` (faulty.hpp): rules that match outgoing frames
/// (type, sending role, sender, key, part, round, or any predicate) and say what to do to them
/// (drop, delay, duplicate, corrupt, cut), how often. A faulty transport gets its plan through
/// its options (faulty_options.hpp).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "byteps/core/config.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {

/// What to do to one outgoing frame.
struct fault {
  enum class kind { pass, drop, delay, duplicate, corrupt_header, corrupt_payload, cut };

  kind action = kind::pass;
  std::chrono::milliseconds wait{0};  ///< delay: how long the frame is held
  std::size_t at = 0;                 ///< corrupt_payload: the byte to invert (modulo size)

  static fault pass() { return {}; }
  static fault drop() { return {kind::drop}; }
  static fault delay(std::chrono::milliseconds d) { return {kind::delay, d}; }
  static fault duplicate() { return {kind::duplicate}; }
  static fault corrupt_header() { return {kind::corrupt_header}; }
  static fault corrupt_payload(std::size_t at = 0) { return {kind::corrupt_payload, {}, at}; }
  static fault cut() { return {kind::cut}; }
};

constexpr std::string_view fault_name(fault::kind k) noexcept {
  switch (k) {
    case fault::kind::pass: return "pass";
    case fault::kind::drop: return "drop";
    case fault::kind::delay: return "delay";
    case fault::kind::duplicate: return "duplicate";
    case fault::kind::corrupt_header: return "corrupt_header";
    case fault::kind::corrupt_payload: return "corrupt_payload";
    case fault::kind::cut: return "cut";
  }
  return "?";
}

/// An outgoing frame, as a rule sees it.
struct outgoing_frame {
  const wire::header& header;  ///< as given to send (payload_bytes may not be filled in yet)
  std::span<const std::byte> payload;
  role from;              ///< the sending node's role (its `Config::node_role`)
  std::string_view peer;  ///< where the link goes, "host:port"
  std::uint64_t index;    ///< how many frames this link sent before this one
};

/// Which frames a rule applies to: every field that is set must match.
struct frame_match {
  // Each member has an initializer so that designated initializers may leave any out.
  std::optional<wire::msg> type{};
  std::optional<role> from{};             ///< the sending node's role
  std::optional<std::uint32_t> sender{};  ///< header.sender (a worker's rank on push, declare...)
  std::optional<std::uint64_t> key{};
  std::optional<std::uint32_t> part{};
  std::optional<std::uint64_t> round{};
  std::function<bool(const outgoing_frame&)> also{};  ///< any further condition

  bool operator()(const outgoing_frame& f) const {
    const auto& h = f.header;
    return (!type || h.type == *type) && (!from || f.from == *from) &&
           (!sender || h.sender == *sender) && (!key || h.key == *key) &&
           (!part || h.part == *part) && (!round || h.round == *round) && (!also || also(f));
  }
};

struct fault_rule {
  static constexpr std::uint64_t always = std::numeric_limits<std::uint64_t>::max();

  frame_match when{};
  fault action{};
  std::uint64_t skip = 0;   ///< let this many matching frames pass first (the Nth: N - 1)
  std::uint64_t times = 1;  ///< then act on this many (`always`: every one after)
};

/// The faults to inject, shared by every node that should see them.
class fault_plan {
 public:
  using rule_id = std::size_t;
  using clock = std::chrono::steady_clock;

  /// Adds a rule after the existing ones; returns its id for `fired`.
  rule_id add(fault_rule r) {
    std::lock_guard lock(mu_);
    rules_.push_back(entry{std::move(r)});
    return rules_.size() - 1;
  }

  /// Every rule stops acting; frames pass from now on. Counts are kept.
  void clear() {
    std::lock_guard lock(mu_);
    for (auto& e : rules_) e.active = false;
  }

  /// How many frames rule `id` acted on so far.
  std::uint64_t fired(rule_id id) const {
    std::lock_guard lock(mu_);
    return id < rules_.size() ? rules_[id].fired : 0;
  }

  /// Waits until rule `id` acted on at least `n` frames; false when `timeout` passed first.
  bool wait_fired(rule_id id, std::uint64_t n, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return id < rules_.size() && rules_[id].fired >= n; });
  }

  /// The fault for `f` (pass when no rule acts), counting it. Called by the decorator.
  fault decide(const outgoing_frame& f) {
    fault result;
    {
      std::lock_guard lock(mu_);
      for (auto& e : rules_) {
        if (!e.active || e.fired >= e.rule.times || !e.rule.when(f)) continue;
        if (e.seen++ < e.rule.skip) continue;
        ++e.fired;
        result = e.rule.action;
        break;
      }
    }
    if (result.action != fault::kind::pass) cv_.notify_all();
    return result;
  }

 private:
  struct entry {
    fault_rule rule;
    std::uint64_t seen = 0;   // matching frames, while the rule was active
    std::uint64_t fired = 0;  // frames it acted on
    bool active = true;
  };

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<entry> rules_;
};

}  // namespace bps::transport
