#pragma once
/// @file
/// What a worker keeps so that it can survive the loss of a server (failover on:
/// `Config::failover_timeout` > 0), and the protocol it follows. The communicator's failover
/// code is in worker/impl/failover.hpp.
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
///    that sees a worker's push of round r+1 has already seen its offer of round r.
/// 4. The replacement starts empty and adopts rounds from what comes first (server/key_state.hpp).
///    Workers are at most one round apart per partition (a worker pushes r+1 only after every
///    worker pushed r), so: an offer of the round being collected completes it for the workers
///    that re-pushed it; a re-push of the previous round is answered from the offered sum; and
///    when no worker had received the round in flight, the re-pushes are summed afresh. Sums are
///    taken in worker-rank order, so the bits equal those the dead server would have sent.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bps::worker {

/// Failover: a partition's last sum as its server sent it (before averaging).
struct kept_sum {
  std::vector<std::byte> bytes;
  std::uint64_t round = 0;
  bool valid = false;  ///< false until the first answer, and while one is being written
};

/// A worker's view of one server.
template <class Link>
struct server_slot {
  std::shared_ptr<Link> link;
  std::string address;           ///< "host:port", for messages
  std::uint64_t generation = 0;  ///< which link to this rank (a replacement's is the next)
  bool link_closed = false;      ///< the current generation's link has reported on_close
  bool up = true;                ///< false from a loss until the replacement is connected
  std::uint64_t latest_notice = 0;  ///< the newest server_replaced for this rank (a count)
  std::chrono::steady_clock::time_point down_since;
  std::string down_reason;
};

}  // namespace bps::worker
