#pragma once
/// @file
/// `bps::worker::membership<State>`: a worker's view of who is in an elastic job
/// (`Config::elastic()`, docs/reliability.md "Elastic training"). The scheduler's `membership`
/// notices arrive on its I/O thread at any time; the trainer sees them only where it asks, at
/// `step_boundary()` between its steps, so `rank()` and `size()` never move under a step. Sums
/// are right meanwhile without it: every answer says how many processes it sums, and servers
/// ask again for pushes of a round that started over (`answers::redo`).
///
/// A worker joining the running job (rendezvous/impl/scheduler_join_running.hpp) makes the
/// members stop at one step boundary: asked (`step_query`), a member says how many it passed and
/// holds at the next until told the boundary (`join_at`); there it reports with nothing in
/// flight (`at_boundary`, the state attached by the member chosen to send it) and waits for the
/// membership that names the boundary. The newcomer's first `step_boundary()` loads the state.
///
/// @par Thread Safety
/// The notices run on the scheduler link's I/O thread, `step_boundary` on the trainer's; both
/// take the worker's mutex. `rank` and `size` from any thread.

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/membership.hpp"
#include "byteps/rendezvous/inbox.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/worker/join_state.hpp"

namespace bps::worker {

/// `State` is the worker's `shared_state`.
template <class State>
class membership {
 public:
  using clock = std::chrono::steady_clock;
  /// The member's side of the state it may send: where its tensors and barriers stand (under
  /// the worker's mutex).
  using snapshot_fn = std::function<job_state()>;

  /// `rank` and `size`: this process's place when it joined the job; `local_rank` on its
  /// machine. `registry`: what the trainer registered for a worker that joins.
  membership(State& state, const Config& cfg, int rank, int size, int local_rank,
             const state_registry& registry, snapshot_fn snapshot)
      : state_(state),
        cfg_(cfg),
        local_rank_(local_rank),
        registry_(registry),
        snapshot_(std::move(snapshot)),
        place_(pack(rank, size)) {}
  membership(const membership&) = delete;
  membership& operator=(const membership&) = delete;

  /// This worker joined the running job in `m`'s epoch: its first `step_boundary()` loads `s`.
  void joined(rendezvous::membership m, job_state s) {
    std::lock_guard lock(state_.mu);
    steps_ = s.boundaries - 1;  // its first call is the boundary the members stop at
    newest_epoch_ = m.epoch;
    unseen_.push_back(std::move(m));
    arrived_ = std::move(s);
  }
  bool joined_running_job() const {
    std::lock_guard lock(state_.mu);
    return joined_running_job_ || arrived_.has_value();
  }

  /// After the join: notices go to `listen`'s handlers (one that came earlier waits in
  /// `control`); the member's answers in a join go through `control.tell`.
  template <class Control>
  void listen(Control& control) {
    tell_ = [&control](wire::msg type, std::uint64_t round, std::vector<std::byte> payload) {
      control.tell(type, round, std::move(payload));
    };
    control.on_notice(wire::msg::membership, [this](const rendezvous::frame& f) { notice(f); });
    control.on_notice(wire::msg::step_query, [this](const rendezvous::frame&) { asked(); });
    control.on_notice(wire::msg::join_at, [this](const rendezvous::frame& f) { told(f.header); });
  }

  /// Trainer's thread: the change since the last call, if any, which `rank()` and `size()`
  /// reflect from now on. While a worker joins, holds at the agreed boundary until it joined
  /// (at most BYTEPS_OP_TIMEOUT_MS plus the heartbeat timeout). Throws `usage_error` when an
  /// operation is in flight there, `communicator_error` when the worker died or the scheduler
  /// said nothing in time.
  std::optional<membership_event> step_boundary() {
    std::unique_lock lock(state_.mu);
    ++steps_;
    if (arrived_) {  // the first call of a worker that joined the running job
      auto s = std::move(*arrived_);
      arrived_.reset();
      joined_running_job_ = true;
      lock.unlock();
      registry_.load(s);
      lock.lock();
      auto e = event_locked(-1, 0, newest_epoch_);
      e.joined = {state_.machine};
      return e;
    }
    hold_for_join(lock);
    const auto upto = visible_epoch_locked();
    if (upto <= seen_) return std::nullopt;
    return event_locked(rank(), size(), upto);
  }

  int rank() const noexcept { return static_cast<int>(place_.load() >> 32); }
  int size() const noexcept { return static_cast<int>(place_.load() & 0xffffffffu); }

 private:
  // The newest membership this worker may show at this boundary: a join's at the boundary it
  // names, a removal's at the boundary the members agreed on (`told`).
  std::uint64_t visible_epoch_locked() {
    std::uint64_t upto = seen_;
    for (const auto& n : unseen_)
      if (n.boundary != 0 && n.boundary <= steps_) upto = std::max(upto, n.epoch);
    std::erase_if(agreed_, [&](const agreed_boundary& a) {
      if (a.boundary > steps_) return false;
      upto = std::max(upto, a.epoch);
      return true;
    });
    return upto;
  }

  // The notices up to epoch `upto` as one event for the trainer; rank() and size() move to it.
  membership_event event_locked(int old_rank, int old_size, std::uint64_t upto) {
    membership_event e;
    while (!unseen_.empty() && unseen_.front().epoch <= upto) {
      auto& n = unseen_.front();
      if (n.removed >= 0) e.removed.push_back(n.removed);
      if (n.joined >= 0) e.joined.push_back(n.joined);
      shown_ = std::move(n);
      unseen_.pop_front();
    }
    e.epoch = seen_ = shown_.epoch;
    e.old_rank = old_rank;
    e.old_size = old_size;
    // Ranks are machine-major over the machines in the job.
    e.rank = local_rank_;
    for (std::size_t i = 0; i < shown_.members.size() && shown_.members[i] < state_.machine; ++i)
      e.rank += shown_.local_sizes[i];
    e.size = shown_.processes;
    place_.store(pack(e.rank, e.size));
    e.why = shown_.why;
    return e;
  }

  // While a worker joins: hold at the boundary this member promised (until the scheduler names
  // the agreed one) and at the agreed one (until the newcomer joined or the join is off).
  void hold_for_join(std::unique_lock<std::mutex>& lock) {
    const auto deadline = clock::now() + cfg_.op_timeout + cfg_.heartbeat_timeout;
    for (;;) {
      state_.life.throw_if_gone({});
      if (!asked_ || (boundary_ == 0 && steps_ < promised_) ||
          (boundary_ != 0 && steps_ < boundary_))
        return;
      if (boundary_ != 0 && !reported_) {
        reported_ = true;
        report_at_boundary(lock);
        continue;
      }
      if (clock::now() >= deadline)
        throw communicator_error(fmt::format(
            "step_boundary(): the scheduler did not finish a worker's join within {} ms "
            "(BYTEPS_OP_TIMEOUT_MS plus BYTEPS_HEARTBEAT_TIMEOUT_MS)",
            (cfg_.op_timeout + cfg_.heartbeat_timeout).count()));
      // Polled too: the worker's failure wakes no one here.
      changed_.wait_for(lock, std::chrono::milliseconds(20));
    }
  }

  // At the agreed boundary: nothing may be in flight (no round can be, then); the member
  // chosen sends the job's state with its report.
  void report_at_boundary(std::unique_lock<std::mutex>& lock) {
    if (const auto n = state_.ops().active().size(); n > 0)
      throw usage_error(fmt::format(
          "step_boundary(): {} operation(s) still in flight while a worker joins the job; wait "
          "on every handle before calling step_boundary()",
          n));
    std::vector<std::byte> payload;
    if (donor_) {
      job_state s = snapshot_();
      s.boundaries = steps_;
      lock.unlock();
      registry_.save_into(s);
      payload = encode(s);
      lock.lock();
      if (!asked_ || boundary_ != steps_) return;  // the join was called off meanwhile
      if (payload.size() > wire::max_state_payload)
        throw usage_error(fmt::format("step_boundary(): the job's state for a joining worker is "
                                      "{} bytes, more than {} (register less with "
                                      "register_state)",
                                      payload.size(), wire::max_state_payload));
    }
    state_.log.info("waiting at step boundary {} for a worker to join{}", steps_,
                    donor_ ? fmt::format(" (sending it the job's state, {} bytes)", payload.size())
                           : std::string());
    tell_(wire::msg::at_boundary, steps_, std::move(payload));
  }

  // The scheduler's I/O thread: a worker waits to join; say how far this one is, and promise
  // to hold at the next boundary.
  void asked() {
    std::lock_guard lock(state_.mu);
    asked_ = true;
    reported_ = false;
    boundary_ = 0;
    donor_ = false;
    promised_ = steps_ + 1;
    tell_(wire::msg::step_report, steps_, {});
  }

  // The scheduler's I/O thread: the boundary to stop at (0: the join is off), and whether this
  // worker sends the state; or, for a removal, the boundary where it is seen.
  void told(const wire::header& h) {
    {
      std::lock_guard lock(state_.mu);
      if (h.sender == wire::boundary_only) {
        asked_ = false;  // nobody joins: nothing to stop for
        agreed_.push_back({h.round, h.key});
      } else if (h.round == 0) {
        asked_ = false;
        state_.log.info("the pending join was called off; going on");
      } else {
        boundary_ = h.round;
        // Every process of that machine sends its own (its tensors' slices are its own).
        donor_ = static_cast<int>(h.sender) == state_.machine;
      }
    }
    changed_.notify_all();
  }

  // The scheduler's I/O thread.
  void notice(const rendezvous::frame& f) {
    {
      std::lock_guard lock(state_.mu);
      rendezvous::membership m;
      try {
        m = rendezvous::decode_membership(f.payload);
      } catch (const wire::decode_error& e) {
        return state_.die_locked(
            fmt::format("malformed membership notice from the scheduler: {}", e.what()));
      }
      if (m.epoch <= newest_epoch_) return;
      if (!std::binary_search(m.members.begin(), m.members.end(), state_.machine))
        return state_.die_locked(fmt::format(
            "this worker's machine {} was removed from the job (membership epoch {}): {}",
            state_.machine, m.epoch, m.removed == state_.machine ? m.why : "not listed"));
      if (m.boundary != 0) asked_ = false;  // the join this worker held for is done
      const auto line =
          m.joined >= 0
              ? fmt::format("worker {} joined the job at step boundary {}: {} worker processes "
                            "(membership epoch {})",
                            m.joined, m.boundary, m.processes, m.epoch)
              : fmt::format("worker {} removed from the job ({}): {} worker processes go on "
                            "(membership epoch {}); the workers see it at a step boundary they "
                            "agree on",
                            m.removed, m.why, m.processes, m.epoch);
      if (m.lost && m.joined < 0)
        state_.log.warn("{}", line);
      else
        state_.log.info("{}", line);
      newest_epoch_ = m.epoch;
      unseen_.push_back(std::move(m));
    }
    changed_.notify_all();
  }

  State& state_;
  const Config& cfg_;
  const int local_rank_;
  const state_registry& registry_;
  snapshot_fn snapshot_;
  std::function<void(wire::msg, std::uint64_t, std::vector<std::byte>)> tell_;
  std::condition_variable changed_;  // with the worker's mutex: a join's word came
  // Under the worker's mutex:
  std::uint64_t newest_epoch_ = 0;     // of the newest notice
  rendezvous::membership shown_;       // the newest handed out
  std::deque<rendezvous::membership> unseen_;  // notices not handed out yet, oldest first
  // A removal's agreed boundary (`told`): epochs up to `epoch` are seen from `boundary` on.
  struct agreed_boundary {
    std::uint64_t boundary;
    std::uint64_t epoch;
  };
  std::vector<agreed_boundary> agreed_;
  std::uint64_t seen_ = 0;             // the epoch last handed out
  std::uint64_t steps_ = 0;            // step_boundary() calls so far
  bool asked_ = false;                 // a worker waits to join
  std::uint64_t promised_ = 0;         // asked: the boundary held at until told the agreed one
  std::uint64_t boundary_ = 0;         // the agreed boundary (0: not told yet)
  bool donor_ = false;                 // this worker sends the job's state
  bool reported_ = false;              // said it waits at the agreed boundary
  std::optional<job_state> arrived_;   // a worker that joined: the state, until loaded
  bool joined_running_job_ = false;
  // rank() and size() in one word, so a reader never sees one new and the other old; written at
  // step_boundary, read anywhere.
  static std::uint64_t pack(int rank, int size) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(rank)) << 32) |
           static_cast<std::uint32_t>(size);
  }
  std::atomic<std::uint64_t> place_;
};

}  // namespace bps::worker
