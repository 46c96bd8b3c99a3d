#pragma once
/// @file
/// `bps::worker::failover<State>`: how a worker survives the loss of a server (failover on:
/// `Config::failover_timeout` > 0). A strategy that owns its state (the kept sums, the notices,
/// its timer thread), handed the worker's `shared_state` and two hooks (`failover_hooks`: connect
/// to a replacement, send what was held back). `answers` calls it, as its `answer_keeper`, only
/// where failover changes what happens: where an answer lands, when a server link drops. With
/// failover off there is no such object.
///
/// The protocol, from the worker's side:
/// 1. Answers are received into a per-partition `kept_sum`, not into the caller's buffer, and
///    copied there (and averaged) once complete. So an answer cut off by a dying server never
///    spoils the caller's buffer, which still holds this worker's own contribution for a re-push;
///    and the worker keeps the raw sum of the last round of every partition.
/// 2. When the link to server k drops, the worker does not fail. Partitions for k stay pending;
///    new ones for k are held back. The scheduler replaces k (a standby, or k restarted) and
///    sends `server_replaced`; if nothing comes within BYTEPS_FAILOVER_TIMEOUT_MS (plus the
///    heartbeat timeout, by which the scheduler itself gives up), the worker fails naming k.
/// 3. On `server_replaced` the worker connects to the new address, says `peer_hello`, and for
///    every partition that k owns, in order on the new link: `declare` of the tensor's name,
///    `sum_offer` of its kept sum (round r: the last round this worker completed), and `push`
///    of the round in flight if one is pending. Offers before pushes on each link: a replacement
///    that sees a worker's push of round r+1 has already seen its offer of round r. Then every
///    embedding table is declared again and each table request k still owes an answer for is
///    re-sent (worker/row_calls.hpp); the replacement replays the table's journal.
/// 4. The replacement starts empty and adopts rounds from what comes first (server/sync_sum.hpp,
///    server/key_state.hpp).
///    Workers are at most one round apart per partition (a worker pushes r+1 only after every
///    worker pushed r), so: an offer of the round being collected completes it for the workers
///    that re-pushed it; a re-push of the previous round is answered from the offered sum; and
///    when no worker had received the round in flight, the re-pushes are summed afresh. Sums are
///    taken in worker-rank order, so the bits equal those the dead server would have sent.

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/detail/timer_thread.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/rendezvous/inbox.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/wire/frame.hpp"
#include "byteps/worker/answers.hpp"
#include "byteps/worker/dispatcher.hpp"
#include "byteps/worker/op_table.hpp"
#include "byteps/worker/row_calls.hpp"

namespace bps::worker {

/// A partition's last sum as its server sent it (before averaging). The next answer is written
/// beside it, in `incoming`, so a server that dies in the middle of an answer leaves the last
/// whole one to offer: in async mode it carries this worker's applied deltas, which the other
/// workers' offers may not hold yet.
struct kept_sum {
  std::vector<std::byte> bytes;     ///< the last whole answer
  std::vector<std::byte> incoming;  ///< the answer being written
  std::uint64_t round = 0;
  bool valid = false;  ///< false until the first whole answer
  /// wire::flag_applied: `bytes` end with the applied counts of async training, which an offer
  /// carries back
  std::uint32_t flags = 0;
  /// Elastic training: the worker processes the sum holds (the answer's `sender`), which an
  /// offer carries back at its end, so a replacement answers it with the right divisor
  std::uint32_t contributors = 0;
};

/// What failover asks of the worker beyond its shared state.
template <class LinkPtr>
struct failover_hooks {
  /// Connects to server `server`'s replacement at `where` as link generation `generation` and
  /// says hello; null once `gone()`; throws `communicator_error` at BYTEPS_CONNECT_TIMEOUT_MS.
  std::function<LinkPtr(const rendezvous::address& where, int server, std::uint64_t generation,
                        std::function<bool()> gone)>
      connect;
  /// Under the worker's mutex: one dispatch pass (what was held back for a lost server goes).
  std::function<void()> dispatch_locked;
};

/// `State` is the worker's `shared_state`, whose mutex guards everything here but the timer
/// thread.
template <class State>
class failover final : public answer_keeper {
 public:
  using clock = std::chrono::steady_clock;
  using link_ptr = typename State::link_ptr;

  failover(State& state, worker::answers<State>& answers, failover_hooks<link_ptr> hooks)
      : state_(state), answers_(answers), hooks_(std::move(hooks)) {
    state_.rows.keep_payloads();  // a table call's requests, for the replacement
  }
  failover(const failover&) = delete;
  failover& operator=(const failover&) = delete;

  /// After the server table is complete: a notice that came earlier waits in `control` (the
  /// rendezvous client).
  template <class Control>
  void listen(Control& control) {
    control.on_notice(wire::msg::server_replaced,
                      [this](const rendezvous::frame& f) { on_server_replaced(f); });
  }

  /// Ends a reconnect in progress (the node is closing) and the replacement deadlines.
  void stop() { timer_.stop(); }

  /// Under the node's mutex: the answer for `p` is read beside the partition's kept sum, not
  /// into the caller's buffer, so an answer cut off by a dying server spoils neither the buffer,
  /// which still holds this worker's contribution for a re-push, nor the last whole sum, which
  /// the replacement is offered. `at`: where this frame's bytes start (a piece of the answer
  /// after the first, from a cut-through server).
  std::span<std::byte> answer_destination(const wire::header& h, pending_part& p, std::size_t at,
                                          op_ptr& receiving) override {
    if (p.receiving) return {};  // an old link still writes it (cannot happen: we wait for it)
    kept_sum& kept = kept_[key_id{h.key, h.part}];
    p.receiving = true;
    kept.incoming.resize(at + h.payload_bytes);  // encoded, with a compressor
    ++p.op->receiving;
    receiving = p.op;
    return std::span(kept.incoming).subspan(at);
  }

  /// I/O thread: the answer for `h` is complete beside its kept sum (`last`; else one more
  /// piece of it is in); the caller's buffer gets a copy (decoded, averaged if asked), and then
  /// it becomes the kept sum. Nothing else touches the incoming bytes meanwhile: a
  /// replacement's link starts only after this one closed, and an offer sends the kept ones.
  void answered(const wire::header& h, const op_ptr& op, std::span<std::byte> payload,
                bool last) override {
    const key_id id{h.key, h.part};
    if (!last) {
      std::lock_guard lock(state_.mu);
      if (auto* p = state_.ops().awaiting(id); p != nullptr && p->op == op) p->receiving = false;
      --op->receiving;
      return answers_.piece_in(id, op, payload.size());
    }
    std::span<const std::byte> sum = payload;
    if ((h.flags & wire::flag_piece) != 0) {
      std::lock_guard lock(state_.mu);
      sum = kept_[id].incoming;
    }
    if (!answers_.deliver(h, op, sum)) {
      std::lock_guard lock(state_.mu);
      if (auto* p = state_.ops().awaiting(id); p != nullptr && p->op == op) p->receiving = false;
      --op->receiving;
      state_.ops().release_if_done(op);
      return;
    }
    std::lock_guard lock(state_.mu);
    kept_sum& kept = kept_[id];
    kept.bytes.swap(kept.incoming);
    kept.round = h.round;
    kept.flags = h.flags & wire::flag_applied;
    kept.contributors = h.sender;
    kept.valid = true;
    if (auto* p = state_.ops().awaiting(id); p != nullptr && p->op == op) p->receiving = false;
    --op->receiving;
    state_.ops().answered(id, op);
  }

  /// Under the node's mutex. The link to `server` dropped: wait for the scheduler's
  /// `server_replaced`, bounded.
  void server_down_locked(int server, const std::string& reason) override {
    auto& slot = state_.links[server];
    slot.up = false;
    slot.down_since = clock::now();
    slot.down_reason = reason;
    const auto& cfg = state_.cfg;
    state_.log.warn(
        "lost server {} at {}: {}; waiting up to {} ms for its replacement "
        "(BYTEPS_FAILOVER_TIMEOUT_MS)",
        server, slot.address, reason, cfg.failover_timeout.count());
    timer_.post_at(slot.down_since + cfg.failover_timeout + cfg.heartbeat_timeout,
                   [this, server, generation = slot.generation](bool cancelled) {
                     if (!cancelled) replacement_overdue(server, generation);
                   });
  }

 private:
  // Timer thread. The scheduler fails the job itself when no replacement comes; this is the
  // worker's own bound, for when its link to a server dropped but the scheduler saw nothing.
  void replacement_overdue(int server, std::uint64_t generation) {
    std::lock_guard lock(state_.mu);
    const auto& slot = state_.links[server];
    if (slot.up || slot.generation != generation || state_.life.closing()) return;
    const auto& cfg = state_.cfg;
    state_.die_locked(
        fmt::format("lost server {} at {} ({}), and no replacement came within {} "
                    "ms (BYTEPS_FAILOVER_TIMEOUT_MS={} plus "
                    "BYTEPS_HEARTBEAT_TIMEOUT_MS={})",
                    server, slot.address, slot.down_reason,
                    (cfg.failover_timeout + cfg.heartbeat_timeout).count(),
                    cfg.failover_timeout.count(), cfg.heartbeat_timeout.count()));
  }

  // The scheduler's I/O thread: hand the reconnect to the timer thread (connecting blocks).
  void on_server_replaced(const rendezvous::frame& f) {
    rendezvous::server_replaced m;
    try {
      m = rendezvous::decode_server_replaced(f.payload);
    } catch (const wire::decode_error& e) {
      std::lock_guard lock(state_.mu);
      return state_.die_locked(
          fmt::format("malformed server_replaced from the scheduler: {}", e.what()));
    }
    std::uint64_t notice = 0;
    {
      std::lock_guard lock(state_.mu);
      notice = ++notices_;
      if (state_.links.known(m.rank)) state_.links[m.rank].latest_notice = notice;
    }
    timer_.post_at(clock::now(), [this, m, notice](bool cancelled) {
      if (!cancelled) reconnect(m.rank, m.where, notice);
    });
  }

  // Timer thread: server `server` now listens at `where`. Drop the old link (waiting, bounded,
  // until it reported its close, so no answer is still being written), connect, and re-send.
  void reconnect(int server, const rendezvous::address& where, std::uint64_t notice) {
    const auto address = fmt::format("{}:{}", where.host, where.port);
    link_ptr old;
    std::uint64_t generation = 0;
    {
      std::lock_guard lock(state_.mu);
      if (state_.life.gone()) return;
      if (!state_.links.known(server))
        return state_.die_locked(
            fmt::format("the scheduler replaced server {}, but this job has "
                        "{} servers",
                        server, state_.links.size()));
      auto& slot = state_.links[server];
      if (slot.latest_notice != notice) return;  // replaced again since: go to the newest
      if (slot.up) {  // the scheduler saw it die first (it stopped responding); drop it now
        slot.up = false;
        slot.down_since = clock::now();
        slot.down_reason = "replaced by the scheduler";
      }
      old = slot.link;
      generation = slot.generation;
    }
    old->close();
    {
      std::unique_lock lock(state_.mu);
      if (!state_.links.wait_closed(lock, server, std::chrono::seconds(5)))
        state_.log.warn("the old link to server {} did not report its close within 5 s", server);
    }
    // The handshake waits for the replacement's challenge on the link's I/O thread, which takes
    // the node's mutex for anything it reads: so outside it. Nothing is sent on the link before
    // the hello, and nothing comes back for it until this worker pushes there. A replacement
    // that closes connections before their challenge (its pending limit is full: a flood) is
    // tried again on fresh ones until BYTEPS_CONNECT_TIMEOUT_MS.
    link_ptr fresh;
    try {
      fresh = hooks_.connect(where, server, generation + 1, [&] {
        std::lock_guard lock(state_.mu);
        return state_.life.gone() || state_.links[server].latest_notice != notice;
      });
    } catch (const communicator_error& e) {
      std::lock_guard lock(state_.mu);
      if (state_.life.gone() || state_.links[server].latest_notice != notice) return;
      // The replacement may have died too before its challenge, and the scheduler's next notice
      // not be here yet: wait for it as for any lost server (bounded; the job fails naming this
      // if none comes).
      return server_down_locked(
          server,
          fmt::format("its replacement at {} failed during the handshake: {}", address, e.what()));
    }
    if (!fresh) return;
    std::tuple<std::size_t, std::size_t, std::size_t> sent;
    {
      std::lock_guard lock(state_.mu);
      auto& slot = state_.links[server];
      if (state_.life.gone() || slot.latest_notice != notice) return fresh->close();
      slot.generation = generation + 1;
      slot.link = fresh;
      slot.link_closed = false;
      slot.address = address;
      slot.up = true;
      sent = resend_locked(server);
      hooks_.dispatch_locked();
    }
    state_.log.warn(
        "server {} replaced by {}: re-sent {} sum(s) this worker had received, "
        "{} partition(s) in flight and {} table request(s)",
        server, address, std::get<0>(sent), std::get<1>(sent), std::get<2>(sent));
  }

  // For every partition that `server` owns: the tensor's name, the kept sum, and the pending
  // push (if it already left the scheduler's queue; the queue sends the others); then the
  // tables' declarations and requests. Returns (sums, pushes, table requests).
  std::tuple<std::size_t, std::size_t, std::size_t> resend_locked(int server) {
    std::size_t sums = 0, pushes = 0;
    const auto& link = state_.links[server].link;
    auto& ops = state_.ops();
    ops.for_each_tensor([&](std::uint64_t key, tensor& t) {
      t.declared[static_cast<std::size_t>(server)] = false;
      for (std::uint32_t i = 0; i < t.parts.size(); ++i) {
        if (state_.dispatcher.server_for(key, i) != server) continue;
        auto kept = kept_.find(key_id{key, i});
        const bool offer = kept != kept_.end() && kept->second.valid;
        auto* p = ops.awaiting(key_id{key, i});
        const bool push = p != nullptr && p->dispatched && !p->op->failure;
        if (!offer && !push) continue;
        declare_once(t, key, server, *link, state_.machine);
        if (offer) {
          wire::header h;
          h.type = wire::msg::sum_offer;
          h.flags = kept->second.flags;
          h.sender = static_cast<std::uint32_t>(state_.machine);
          h.key = key;
          h.part = i;
          h.dtype = static_cast<std::uint32_t>(t.type);
          h.round = kept->second.round;
          h.tensor_bytes = t.bytes;
          h.offset = t.parts[i].offset;
          // A copy: the kept bytes may be overwritten by the next answer while this is queued.
          auto copy = std::make_shared<std::vector<std::byte>>(kept->second.bytes);
          if (state_.cfg.elastic() && (h.flags & wire::flag_applied) == 0)
            wire::append_contributors(*copy, kept->second.contributors);
          link->send(h, *copy, [copy] {});
          ++sums;
        }
        if (push) {  // the replacement answers from the start
          repush_locked(state_, t, key, i, *p, *link);
          ++pushes;
        }
      }
    });
    const auto rows = state_.rows.resend(
        server, [&](std::uint64_t key, dtype type, std::uint64_t round,
                    const std::shared_ptr<std::vector<std::byte>>& payload) {
          link->send(rows_header(key, type, round, state_.machine), *payload, [payload] {});
        });
    return {sums, pushes, rows};
  }

  State& state_;
  worker::answers<State>& answers_;
  failover_hooks<link_ptr> hooks_;
  std::unordered_map<key_id, kept_sum, key_id_hash> kept_;  // by partition: the last sum
  std::uint64_t notices_ = 0;                               // server_replaced notices so far
  detail::timer_thread timer_;  // reconnects and replacement deadlines; last: stops first
};

}  // namespace bps::worker
