#pragma once
/// @file
/// `server::waiting_rooms`: which workers wait for which round of each key of one engine. The
/// server answers them when its handler releases or fails the round, names the missing workers
/// when a round stalls, and reports how far behind each worker is. It is the server's, not the
/// handler's, so that every handler gets the same answers, stall reports and failures.
///
/// @par Thread Safety
/// None: the engine's lock guards it, as it guards the engine's handler.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "byteps/core/keys.hpp"

namespace bps::server {

/// How far one worker is behind: the partitions whose round waits for its push, and how long
/// the oldest of them has waited.
struct worker_lag {
  int partitions = 0;
  std::chrono::steady_clock::duration oldest{};
};

/// `Session` has an `int worker`, the rank of the worker on that link.
template <class Session>
class waiting_rooms {
 public:
  using clock = std::chrono::steady_clock;

  /// The workers waiting for one round of one key.
  struct room {
    std::uint64_t round = 0;
    std::vector<std::shared_ptr<Session>> workers;  // in arrival order
    clock::time_point started;                      // when the first of them pushed
    bool stall_reported = false;
    /// Timeline: by worker, when its traced push of this round was summed (0: not traced).
    std::vector<std::int64_t> trace_summed_ns;
  };

  /// `s` waits for round `round` of `id`; the first to wait opens the room.
  room& join(const key_id& id, std::shared_ptr<Session> s, std::uint64_t round) {
    room& r = rooms_[id];
    if (r.workers.empty()) {
      r.round = round;
      r.started = clock::now();
      r.stall_reported = false;
      std::fill(r.trace_summed_ns.begin(), r.trace_summed_ns.end(), 0);
    }
    r.workers.push_back(std::move(s));
    return r;
  }

  /// The room of `id`, empty when nobody waits.
  room& at(const key_id& id) { return rooms_[id]; }

  /// Takes worker `worker` out of `id`'s room, to be answered alone; null when it is not there.
  std::shared_ptr<Session> take(const key_id& id, int worker) {
    return take_if(id, [worker](const Session& s) { return s.worker == worker; });
  }

  /// Takes the first worker of `id`'s room for which `pred(session)` holds, to be answered
  /// alone; null when none does.
  template <class Pred>
  std::shared_ptr<Session> take_if(const key_id& id, Pred&& pred) {
    auto& w = rooms_[id].workers;
    auto it = std::find_if(w.begin(), w.end(), [&](const auto& s) { return pred(*s); });
    if (it == w.end()) return nullptr;
    auto s = std::move(*it);
    w.erase(it);
    return s;
  }

  /// Calls `f(id, room)` for each key that has workers waiting.
  template <class F>
  void for_each_waiting(F&& f) {
    for (auto& [id, r] : rooms_)
      if (!r.workers.empty()) f(id, r);
  }

  /// Workers 0 .. num_workers-1 that are not in `r`.
  static std::vector<int> missing(const room& r, int num_workers) {
    std::vector<bool> in(static_cast<std::size_t>(num_workers), false);
    for (const auto& s : r.workers)
      if (s->worker >= 0 && s->worker < num_workers) in[static_cast<std::size_t>(s->worker)] = true;
    std::vector<int> m;
    for (int w = 0; w < num_workers; ++w)
      if (!in[static_cast<std::size_t>(w)]) m.push_back(w);
    return m;
  }

  /// Adds, for each worker missing from an open room, that partition and its age to `lag`
  /// (indexed by worker, `num_workers` long).
  void add_lag(clock::time_point now, int num_workers, std::vector<worker_lag>& lag) const {
    for (const auto& [id, r] : rooms_) {
      if (r.workers.empty()) continue;
      for (int w : missing(r, num_workers)) {
        auto& l = lag[static_cast<std::size_t>(w)];
        ++l.partitions;
        l.oldest = std::max(l.oldest, now - r.started);
      }
    }
  }

 private:
  std::unordered_map<key_id, room, key_id_hash> rooms_;
};

}  // namespace bps::server
