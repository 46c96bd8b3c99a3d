#pragma once
/// @file
/// Rendezvous payloads: `hello` (a node introduces itself to the scheduler) and `welcome` (the
/// scheduler's answer: the node's rank and the cluster's address table), and the check that
/// refuses a node whose settings differ from the scheduler's.

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/rendezvous/auth.hpp"
#include "byteps/wire/codec.hpp"

namespace bps::rendezvous {

/// Raised when nodes of two different byteps protocol generations meet.
// 2: heartbeats, job token; 3: local ranks; 4: server failover (standby, sum_offer,
// server_replaced); 5: clock probes (a heartbeat's round and offset carry clock times, for the
// timeline), the push flag `traced`; 6: answers in pieces (`pull_response` flags `piece`,
// `last_piece`), for cut-through summation; 7: asynchronous training (hello's `async_mode`
// and `staleness`); 8: compression decoded by servers (`declare` carries the name and a
// compressor recipe, wire/declare.hpp; the flag `compressed`); 9: the job token proved by
// challenge-response (the `challenge` frame, a hello ends with its proof, rendezvous/auth.hpp;
// no token digest in the hello), `peer_hello` carries its local rank and proof, `bye` its reason;
// 10: async training with failover (answers and offers flagged `applied` end with each worker's
// count of applied deltas, server/async_key.hpp); 11: elastic training (hello's `min_workers`
// and `max_workers`, the `membership` notice, the server's `redo`); 12: joining a running
// elastic job (`membership`'s `joined` and `boundary`, `welcome`'s `epoch`, the frames
// `step_query` .. `membership_ack`); 13: a push flagged `no_data` (a broadcast's from a machine
// without its root), whose rounds fail when no push holds data; `join_at` from `boundary_only`
// (a removal seen at an agreed step boundary); 14: hello's `shares_memory`, `welcome`'s
// `in_shared_memory`
inline constexpr std::uint32_t protocol_version = 14;

struct hello {
  std::uint32_t protocol = protocol_version;
  role node_role = role::worker;
  std::int32_t requested_rank =
      -1;                       ///< DMLC_WORKER_ID (a worker's machine), BYTEPS_SERVER_ID, or -1
  std::int32_t local_rank = 0;  ///< workers: BYTEPS_LOCAL_RANK on its machine
  std::int32_t local_size = 1;  ///< workers: BYTEPS_LOCAL_SIZE of its machine
  std::string host;             ///< servers: where workers reach them
  std::uint16_t port = 0;
  // Settings that must agree across the cluster.
  std::uint64_t partition_bytes = 0;
  std::int32_t num_workers = 0;
  std::int32_t num_servers = 0;
  std::string key_hash;
  std::uint8_t mixed_mode = 0;  ///< BYTEPS_ENABLE_MIXED_MODE
  bool failover = false;        ///< BYTEPS_FAILOVER_TIMEOUT_MS > 0 (must agree across the cluster)
  bool standby = false;         ///< servers: BYTEPS_SERVER_STANDBY, waits to replace a dead server
  bool async_mode = false;      ///< BYTEPS_ENABLE_ASYNC (must agree across the cluster)
  std::int64_t staleness = -1;  ///< BYTEPS_ASYNC_STALENESS, -1 unbounded (must agree)
  std::int32_t min_workers = 0;  ///< BYTEPS_MIN_NUM_WORKER, 0 unset (must agree)
  std::int32_t max_workers = 0;  ///< BYTEPS_MAX_NUM_WORKER, 0 unset (must agree)
  /// Workers and servers: moves payloads to a peer on its host through shared memory
  /// (`transport::ipc` with BYTEPS_ENABLE_IPC on); set by the node from its transport.
  bool shares_memory = false;

  BYTEPS_DECL static hello from(const Config& c, role r);
};

struct address {
  std::string host;
  std::uint16_t port = 0;
  friend bool operator==(const address&, const address&) = default;
};

struct welcome {
  std::int32_t rank = 0;         ///< a server's rank, or a worker's machine
  std::int32_t num_workers = 0;  ///< machines (DMLC_NUM_WORKER)
  std::int32_t num_servers = 0;
  std::int32_t global_rank = 0;  ///< workers: rank among all worker processes, machine-major
  std::int32_t global_size = 0;  ///< worker processes in the job (sum of local sizes)
  std::int32_t slices = 1;       ///< the largest local size: slices per tensor, cluster-wide
  std::uint64_t job_id = 0;      ///< random per job: names shared-memory segments
  std::vector<address> servers;  ///< by server rank
  /// Elastic training: the membership epoch a worker joined a running job at (its
  /// `join_state` follows); 0 for a node that formed the job.
  std::uint64_t epoch = 0;
  /// When the job formed, every node reached the scheduler from one host (`all_on_one_host`)
  /// and every worker and server said it moves payloads through shared memory: no payload
  /// crosses a socket. The same on every node, so every worker's partitioner may follow it
  /// (`bps::job_shape`).
  bool in_shared_memory = false;
  friend bool operator==(const welcome&, const welcome&) = default;
};

BYTEPS_DECL std::vector<std::byte> encode(const hello& h);

BYTEPS_DECL hello decode_hello(std::span<const std::byte> in);

/// A hello as it travels: its bytes, then the proof that its sender holds the job's token, for
/// the nonce of the scheduler's `challenge` (auth.hpp).
BYTEPS_DECL std::vector<std::byte> encode_proved(const hello& h, std::string_view token,
                                                 const nonce& n);

/// The protocol number a hello payload starts with, or nullopt when it is shorter than that.
BYTEPS_DECL std::optional<std::uint32_t> hello_protocol(std::span<const std::byte> in);

/// `encode_proved`'s payload split into the hello's bytes and the proof; nullopt when it is
/// too short to hold a proof.
inline std::optional<std::pair<std::span<const std::byte>, std::span<const std::byte>>> split_proof(
    std::span<const std::byte> in) {
  if (in.size() < proof_bytes + 4) return std::nullopt;
  return std::pair{in.first(in.size() - proof_bytes), in.last(proof_bytes)};
}

/// A worker's `peer_hello` to a server proves the token for the server's nonce, over the
/// worker's machine and local rank (the frame's `sender` and `part`).
BYTEPS_DECL proof peer_hello_proof(std::string_view token, const nonce& n, std::uint32_t machine,
                                   std::uint32_t local_rank);

/// True when `given` is `peer_hello_proof(token, n, machine, local_rank)`; constant time.
BYTEPS_DECL bool verify_peer_hello(std::string_view token, const nonce& n, std::uint32_t machine,
                                   std::uint32_t local_rank, std::span<const std::byte> given);

BYTEPS_DECL std::vector<std::byte> encode(const welcome& m);

BYTEPS_DECL welcome decode_welcome(std::span<const std::byte> in);

/// Failover (scheduler -> every worker): server `rank` died and its replacement listens at
/// `where`. The worker drops what it holds of the old server and re-sends there (see
/// worker/failover.hpp).
struct server_replaced {
  std::int32_t rank = 0;
  address where;
  friend bool operator==(const server_replaced&, const server_replaced&) = default;
};

BYTEPS_DECL std::vector<std::byte> encode(const server_replaced& m);

BYTEPS_DECL server_replaced decode_server_replaced(std::span<const std::byte> in);

/// Elastic training (scheduler -> every worker and server): the worker machines in the job from
/// membership epoch `epoch` on. Sent when a worker machine is removed or joins (epoch 1 is the
/// first change; the job formed at epoch 0 with every machine).
struct membership {
  std::uint64_t epoch = 0;
  std::vector<std::int32_t> members;  ///< worker machines taking part, ascending
  std::vector<std::int32_t> local_sizes;  ///< by member: its worker processes (local size)
  std::int32_t processes = 0;         ///< worker processes on them (the sum of their local sizes)
  std::int32_t removed = -1;          ///< the machine this change removed (-1: none)
  std::string why;                    ///< what happened to it ("disconnected (...)", "left")
  bool lost = true;                   ///< it was lost (a failure), rather than it left
  std::int32_t joined = -1;           ///< the machine this change added (-1: none)
  /// A join: the step boundary every member waits at for it (the workers' `step_boundary()`
  /// calls, counted from 1); 0 for a removal, whose boundary the scheduler names after it
  /// (`join_at` from `wire::boundary_only`).
  std::uint64_t boundary = 0;
  friend bool operator==(const membership&, const membership&) = default;
};

BYTEPS_DECL std::vector<std::byte> encode(const membership& m);

/// @throws wire::decode_error when malformed (members not ascending, a count out of range).
BYTEPS_DECL membership decode_membership(std::span<const std::byte> in);

/// The first setting in which `theirs` (a node at `where`) differs from `mine` (the scheduler),
/// as a message for that node; nullopt when they agree.
BYTEPS_DECL std::optional<std::string> first_difference(const hello& mine, const hello& theirs,
                                                        const std::string& where);

}  // namespace bps::rendezvous

#if BYTEPS_INCLUDE_BODIES
#include "byteps/rendezvous/impl/messages.hpp"
#endif
