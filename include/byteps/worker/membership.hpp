#pragma once
/// @file
/// `bps::worker::membership<State>`: a worker's view of who is in an elastic job
/// (`Config::elastic()`, docs/reliability.md "Elastic training"). The scheduler's `membership`
/// notices arrive on its I/O thread at any time; the trainer sees them only where it asks, at
/// `step_boundary()` between its steps, so `rank()` and `size()` never move under a step. Sums
/// are right meanwhile without it: every answer says how many processes it sums, and servers
/// ask again for pushes of a round that started over (`answers::redo`).
///
/// @par Thread Safety
/// `notice` runs on the scheduler link's I/O thread, `step_boundary` on the trainer's; both take
/// the worker's mutex. `rank` and `size` from any thread.

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/membership.hpp"
#include "byteps/rendezvous/inbox.hpp"
#include "byteps/rendezvous/messages.hpp"

namespace bps::worker {

/// `State` is the worker's `shared_state`.
template <class State>
class membership {
 public:
  /// `rank` and `size`: this process's place when the job formed; `local_rank` on its machine.
  membership(State& state, int rank, int size, int local_rank)
      : state_(state), local_rank_(local_rank), place_(pack(rank, size)) {}
  membership(const membership&) = delete;
  membership& operator=(const membership&) = delete;

  /// After the join: notices go to `notice` (one that came earlier waits in `control`).
  template <class Control>
  void listen(Control& control) {
    control.on_notice(wire::msg::membership, [this](const rendezvous::frame& f) { notice(f); });
  }

  /// Trainer's thread: the change since the last call, if any, which `rank()` and `size()`
  /// reflect from now on.
  std::optional<membership_event> step_boundary() {
    std::lock_guard lock(state_.mu);
    if (latest_.epoch == seen_) return std::nullopt;
    membership_event e;
    e.epoch = seen_ = latest_.epoch;
    e.old_rank = rank();
    e.old_size = size();
    // Ranks are machine-major over the machines still in the job.
    e.rank = local_rank_;
    for (std::size_t i = 0; i < latest_.members.size() && latest_.members[i] < state_.machine; ++i)
      e.rank += latest_.local_sizes[i];
    e.size = latest_.processes;
    place_.store(pack(e.rank, e.size));
    e.removed = std::exchange(removed_, {});
    e.why = latest_.why;
    return e;
  }

  int rank() const noexcept { return static_cast<int>(place_.load() >> 32); }
  int size() const noexcept { return static_cast<int>(place_.load() & 0xffffffffu); }

 private:
  // The scheduler's I/O thread.
  void notice(const rendezvous::frame& f) {
    std::lock_guard lock(state_.mu);
    rendezvous::membership m;
    try {
      m = rendezvous::decode_membership(f.payload);
    } catch (const wire::decode_error& e) {
      return state_.die_locked(
          fmt::format("malformed membership notice from the scheduler: {}", e.what()));
    }
    if (m.epoch <= latest_.epoch) return;
    if (!std::binary_search(m.members.begin(), m.members.end(), state_.machine))
      return state_.die_locked(fmt::format(
          "this worker's machine {} was removed from the job (membership epoch {}): {}",
          state_.machine, m.epoch, m.removed == state_.machine ? m.why : "not listed"));
    if (m.removed >= 0) removed_.push_back(m.removed);
    const auto line = fmt::format("worker {} removed from the job ({}): {} worker processes go "
                                  "on (membership epoch {}); this worker sees it at its next "
                                  "step_boundary()",
                                  m.removed, m.why, m.processes, m.epoch);
    if (m.lost)
      state_.log.warn("{}", line);
    else
      state_.log.info("{}", line);
    latest_ = std::move(m);
  }

  State& state_;
  const int local_rank_;
  rendezvous::membership latest_;  // under the worker's mutex
  std::vector<int> removed_;       // under the worker's mutex: since the last event
  std::uint64_t seen_ = 0;         // under the worker's mutex: the epoch last handed out
  // rank() and size() in one word, so a reader never sees one new and the other old; written at
  // step_boundary, read anywhere.
  static std::uint64_t pack(int rank, int size) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank)) << 32) |
           static_cast<std::uint32_t>(size);
  }
  std::atomic<std::uint64_t> place_;
};

}  // namespace bps::worker
