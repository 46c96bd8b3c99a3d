#pragma once
/// @file
/// The timeline (BYTEPS_TRACE_ON): `detail::trace_recorder` keeps one node's spans in memory and
/// writes them, at shutdown, as Chrome trace JSON (opens in Perfetto and chrome://tracing) to
/// `BYTEPS_TRACE_DIR/worker-<rank>.json` or `server-<rank>.json`. `detail::tracer` is what a node
/// holds: with tracing off it holds nothing, and every hook is one test of a null pointer (no
/// allocation, no clock read).
///
/// What a file holds (docs/architecture.md, "Timeline"):
/// - `"ph":"X"` spans, `ts`/`dur` in microseconds of the node's steady clock; `pid` names the
///   node (worker r: 1000 + r, server s: 2000 + s), `tid` a lane: on a worker one per tensor
///   (its span, call to done; with a local collective, the local stage's `reduce_scatter` and
///   `all_gather` inside it) and one per partition (stages `queue`, `push`, `pull`); on a
///   server one per partition and worker (stages `receive`, `sum`, `wait`, `answer`).
/// - `"ph":"M"` names for the process and each lane.
/// - flows (`"ph":"s"`, then `"ph":"f"` with `"bp":"e"`, one `id`): a worker's push of a
///   partition to the server's sum (`push`), and the server's answer to the worker's pull
///   (`pull`). Each file holds its own end of a flow; `byteps-trace merge` joins the files.
/// - `otherData`: the role, rank, step window and the node's clock offset to the scheduler,
///   which `byteps-trace merge` adds to every timestamp to put all nodes on one clock.
///
/// A step is a round of the first tensor the worker push_pulled (BytePS's definition; broadcasts
/// do not count, as they run once, before training); operations
/// that begin while that tensor is in steps BYTEPS_TRACE_START_STEP .. BYTEPS_TRACE_END_STEP-1
/// are recorded. Workers mark the pushes they trace (`wire::flag_traced`), and servers trace
/// exactly those, so both ends of every flow are in the files.
///
/// @par Thread Safety
/// Every member of `trace_recorder` may be called from any thread (one mutex, taken only when
/// tracing is on).

#include <fmt/core.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/detail/clock_sync.hpp"

namespace bps::detail {

/// The id shared by both ends of one flow: worker `worker`'s partition `part` of tensor `key`
/// in round `round`, going to the server (`to_server`) or coming back.
constexpr std::uint64_t trace_flow_id(int worker, std::uint64_t key, std::uint32_t part,
                                      std::uint64_t round, bool to_server) noexcept {
  std::uint64_t x =
      key ^ (round * 0x9e3779b97f4a7c15ull) ^
      (std::uint64_t{part} << 32 | static_cast<std::uint32_t>(worker)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 31)) * 0x94d049bb133111ebull;  // splitmix64's finaliser
  return ((x ^ (x >> 29)) << 1) | (to_server ? 1u : 0u);
}

class trace_recorder {
 public:
  struct event {
    char phase = 'X';  ///< 'X' span, 's' flow start, 'f' flow finish
    std::uint32_t lane = 0;
    const char* name = nullptr;  ///< a stage; nullptr: the lane's tensor name
    std::int64_t ts_ns = 0, dur_ns = 0;
    std::uint64_t flow = 0;
    std::int64_t round = -1;
    std::int32_t part = -1, peer = -1;  ///< peer: the server (on a worker) or worker (on a server)
    std::uint64_t bytes = 0;
    bool failed = false;
  };

  /// Checks that BYTEPS_TRACE_DIR can be made, so a bad folder fails at start, not at the end.
  BYTEPS_DECL trace_recorder(const Config& cfg, role r);

  /// After rendezvous: the node's rank (its file's number), what the timeline calls it
  /// ("worker 0"), and the rank its frames carry (`wire::header::sender`: a worker's machine),
  /// from which flow ids are made.
  void name_node(int rank, std::string name, int wire_rank) {
    std::lock_guard lock(mu_);
    rank_ = rank;
    node_name_ = std::move(name);
    wire_rank_ = wire_rank;
  }
  int wire_rank() const {
    std::lock_guard lock(mu_);
    return wire_rank_;
  }

  /// Whether an operation on tensor `key` in its round `round` is in the step window. The first
  /// tensor seen that `counts_steps` sets the step (a broadcast, done once at the start, does
  /// not: the step would never advance); before it, no step is in the window.
  bool in_window(std::uint64_t key, std::uint64_t round, bool counts_steps = true) {
    std::lock_guard lock(mu_);
    if (!have_first_ && counts_steps) {
      have_first_ = true;
      first_key_ = key;
    }
    if (key == first_key_) step_ = static_cast<std::int64_t>(round);
    return step_ >= start_ && step_ < end_;
  }

  /// The lane for `(key, part, peer)`, made and named by `name()` the first time.
  template <class NameFn>
  std::uint32_t lane(std::uint64_t key, std::int64_t part, int peer, NameFn&& name) {
    std::lock_guard lock(mu_);
    auto [it, fresh] = lanes_.try_emplace(std::tuple{key, part, peer}, 0u);
    if (fresh) {
      it->second = static_cast<std::uint32_t>(lane_names_.size() + 1);
      lane_names_.push_back(name());
    }
    return it->second;
  }

  void add(const event& e) {
    std::lock_guard lock(mu_);
    events_.push_back(e);
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return events_.size();
  }

  bool written() const {
    std::lock_guard lock(mu_);
    return written_;
  }

  /// The file this node writes (empty before `name_node`).
  std::string path() const {
    std::lock_guard lock(mu_);
    return path_locked();
  }

  /// Writes the file once (later calls do nothing). Returns "" or what went wrong.
  BYTEPS_DECL std::string write(const clock_offset& clock);

 private:
  BYTEPS_DECL std::string path_locked() const;

  int pid_locked() const { return (role_ == role::server ? 2000 : 1000) + rank_; }

  BYTEPS_DECL static std::string quoted(std::string_view s);
  static std::string micros(std::int64_t ns) {
    const char* sign = ns < 0 ? "-" : "";
    const std::uint64_t a =
        ns < 0 ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
    return fmt::format("{}{}.{:03}", sign, a / 1000, a % 1000);
  }

  BYTEPS_DECL void write_json_locked(std::ofstream& out, const clock_offset& clock) const;

  const role role_;
  const std::int64_t start_, end_;
  const std::string dir_;
  mutable std::mutex mu_;
  int rank_ = -1;
  int wire_rank_ = -1;
  std::string node_name_;
  bool have_first_ = false;
  std::uint64_t first_key_ = 0;
  std::int64_t step_ = -1;
  std::map<std::tuple<std::uint64_t, std::int64_t, int>, std::uint32_t> lanes_;
  std::vector<std::string> lane_names_;  // lane i + 1
  std::vector<event> events_;
  bool written_ = false;
};

}  // namespace bps::detail

#if BYTEPS_INCLUDE_BODIES
#include "byteps/detail/impl/trace.hpp"
#endif
