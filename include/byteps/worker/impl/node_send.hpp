#pragma once
/// @file
/// The send path of `worker::node` (worker/node.hpp): one pass over what the scheduler lets go,
/// small partitions held per server and fused (worker/fusion.hpp), the others sent at once, and
/// the bookkeeping once a payload left (stage time, the scheduler's credit, the next pass).
/// Included at the end of worker/node.hpp.

#include <span>
#include <utility>
#include <vector>

#include "byteps/worker/node.hpp"

namespace bps::worker {

// One pass over what the scheduler lets go. Small partitions for one server are held and go
// together at the end of the pass (worker/fusion.hpp); the others go at once, after what was
// held for their server, so each link keeps the scheduler's order.
template <class T, class L, class P, class S>
void node<T, L, P, S>::dispatch_locked() {
  auto send = [this](int server, std::vector<held_push>&& pushes) {
    send_pushes(server, std::move(pushes));
  };
  try {
    state_.dispatcher.dispatch(
        state_.life.dead(), [this](int server) { return state_.links[server].up; },
        [this, &send](tensor& t, std::uint64_t key, std::uint32_t part, pending_part& p) {
          declare_once(t, key, p.server, *state_.links[p.server].link, state_.machine);
          ++p.op->in_transport;
          trace_.dispatched(*p.op, p.index, p.server);
          auto payload = state_.dispatcher.push_payload(t, part, p, true);  // encode stage
          ops().stats().pushed(p.server, payload.size());
          held_push push{push_frame(t, key, part, p, state_.machine),
                         payload,
                         {p.op, p.bytes, key_id{key, part}, p.index}};
          if (fusion_.joins(t, payload.size()))
            return fusion_.hold(p.server, std::move(push), send);
          fusion_.flush(p.server, send);
          send(p.server, {std::move(push)});
        });
  } catch (...) {
    fusion_.flush_all(send);  // what was held counts as in the transport: it must go
    throw;
  }
  fusion_.flush_all(send);
}

// A lone push as its frame; more as one push_batch, whose sending runs each one's sent path.
template <class T, class L, class P, class S>
void node<T, L, P, S>::send_pushes(int server, std::vector<held_push>&& pushes) {
  auto& link = *state_.links[server].link;
  if (pushes.size() == 1) {
    const held_push& p = pushes.front();
    // A partition's own push: a worker runs one operation on a tensor at a time.
    return transport::send_partition(link, p.head, p.payload,
                                     [this, m = p.member] { sent(std::span(&m, 1)); });
  }
  auto batch = push_fusion::fuse(pushes, state_.machine);
  ops().stats().batched(batch->members.size());
  link.send(batch->head, batch->bytes, [this, batch] { sent(batch->members); });
}

// The payloads of `members` left: each one's stage time and credit, then one dispatch pass,
// so the credit a batch returns lets the next partitions go together again.
template <class T, class L, class P, class S>
void node<T, L, P, S>::sent(std::span<const batch_member> members) {
  for (const auto& m : members) trace_.sent(*m.op, m.index, m.id.key, m.id.part);
  std::lock_guard lock(state_.mu);
  for (const auto& m : members) {
    if (auto* p = ops().awaiting(m.id); p != nullptr && p->op == m.op) {
      p->sent_at = clock::now();
      ops().at(m.id.key).timing.stages.add(stage::push,
                                           stats_recorder::seconds(p->sent_at - p->dispatched_at));
    }
    state_.dispatcher.sent(m.bytes);
    --m.op->in_transport;
    ops().release_if_done(m.op);
  }
  if (!state_.life.closing()) dispatch_locked();
}

}  // namespace bps::worker
