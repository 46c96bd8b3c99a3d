#pragma once
/// @file
/// The server's part of the timeline for one round of one key: the spans of a worker's traced
/// push (receive, sum) and of the round's answer to each traced worker (wait, answer), with the
/// flows that join them to the workers' own spans. Kept in the key's waiting room
/// (`room::trace_summed_ns`), since the answer's spans start where each worker's sum ended.
///
/// @par Thread Safety
/// Called under the engine's lock that guards the room.

#include <cstddef>
#include <cstdint>

#include "byteps/detail/tracer.hpp"
#include "byteps/server/names.hpp"
#include "byteps/server/session.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

/// Records worker `worker`'s traced push of `h` into round `r` (of `num_workers` workers).
template <class Room>
void trace_push(detail::tracer& trace, const tensor_names& names, Room& r, const wire::header& h,
                int worker, int num_workers, receive_times received, std::int64_t sum_ns) {
  r.trace_summed_ns.resize(static_cast<std::size_t>(num_workers), 0);
  r.trace_summed_ns[static_cast<std::size_t>(worker)] =
      trace.pushed(h.key, h.part, h.round, worker, h.payload_bytes, received.began_ns,
                   received.arrived_ns, sum_ns, trace.now(), [&] { return names.plain(h.key); });
}

/// Records the answer of round `r` to each worker waiting in it, complete at `complete_ns`.
template <class Room>
void trace_answers(detail::tracer& trace, const tensor_names& names, const Room& r,
                   const wire::header& h, std::int64_t complete_ns) {
  for (const auto& w : r.workers)
    if (static_cast<std::size_t>(w->worker) < r.trace_summed_ns.size())
      trace.answered(h.key, h.part, r.round, w->worker,
                     r.trace_summed_ns[static_cast<std::size_t>(w->worker)], complete_ns,
                     [&] { return names.plain(h.key); });
}

}  // namespace bps::server
