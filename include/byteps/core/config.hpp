#pragma once
/// @file
/// `bps::Config`: every setting of a node, as a plain value. Build it in code, or from the
/// environment variables BytePS users know with `Config::from_env()`. Nothing else in byteps
/// reads the environment. `docs/env.md` lists every variable with its default.
///
/// A transport's knobs are its own `options` (transport/tcp/tcp_options.hpp), passed to a node
/// beside the `Config`. `Config` only records, range-checked, the variables that set them
/// (`io_threads`, `enable_ipc`, `rdma`), because it is the one reader of the environment; a
/// transport's `options::from(cfg)` turns that record into its options when a node is given
/// none. Nothing else reads these fields.
///
/// `from_env()` is in core/impl/config_from_env.hpp and `validate()` in core/impl/config.hpp,
/// included at the end of this file in header-only mode (core/linkage.hpp).

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "byteps/core/env_parse.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/net_interface.hpp"
#include "byteps/core/recipe_text.hpp"

namespace bps {

enum class role { scheduler, server, worker };

constexpr std::string_view role_name(role r) noexcept {
  switch (r) {
    case role::scheduler:
      return "scheduler";
    case role::server:
      return "server";
    case role::worker:
      return "worker";
  }
  return "?";
}

/// How a partition's key picks its server (`BYTEPS_KEY_HASH_FN`), as in BytePS.
enum class key_hash_fn { djb2, sdbm, naive, built_in };

constexpr std::string_view key_hash_name(key_hash_fn f) noexcept {
  switch (f) {
    case key_hash_fn::djb2:
      return "djb2";
    case key_hash_fn::sdbm:
      return "sdbm";
    case key_hash_fn::naive:
      return "naive";
    case key_hash_fn::built_in:
      return "built_in";
  }
  return "?";
}

struct Config {
  using millis = std::chrono::milliseconds;

  role node_role = role::worker;             ///< DMLC_ROLE
  int num_workers = 1;                       ///< DMLC_NUM_WORKER
  int num_servers = 1;                       ///< DMLC_NUM_SERVER
  std::string scheduler_host = "127.0.0.1";  ///< DMLC_PS_ROOT_URI
  std::uint16_t scheduler_port = 0;          ///< DMLC_PS_ROOT_PORT (0: scheduler picks one)
  int worker_id = -1;                        ///< DMLC_WORKER_ID: the machine (-1: assigned)
  int server_id = -1;                        ///< BYTEPS_SERVER_ID (-1: scheduler assigns)
  std::string node_host;                     ///< DMLC_NODE_HOST ("": as seen by scheduler)
  std::uint16_t server_port = 0;             ///< BYTEPS_SERVER_PORT (0: ephemeral)
  std::string job_token;                     ///< BYTEPS_JOB_TOKEN ("": no token)
  /// PEM files of `transport::tls` (tls_options.hpp): BYTEPS_TLS_CA, _CERT, _KEY ("": unset).
  std::string tls_ca, tls_cert, tls_key;
  /// BYTEPS_PARTITION_BYTES: the largest partition; 0 (default) = auto, sized per tensor from its
  /// bytes and the number of servers (`partition::by_bytes`), at most `auto_partition_cap`.
  std::size_t partition_bytes = 0;
  int scheduling_credit = 4;  ///< BYTEPS_SCHEDULING_CREDIT (partitions; 0: off)
  /// BYTEPS_SCHEDULING_PRIORITY: workers. true: `schedule::priority` sends the partitions of
  /// higher `push_pull_options::priority` first; false (default): in the order push_pull was
  /// called, which is the same on every worker, so the servers get each partition from all
  /// workers at about the same time (docs/performance.md, "Call order or priority").
  bool scheduling_by_priority = false;
  /// BYTEPS_FUSION_BYTES: tensor fusion (wire/batch.hpp). Uncompressed partitions of at most
  /// this many bytes that a worker dispatches together to one server go as one `push_batch`,
  /// and a server's answers of at most this size that become ready together for one worker as
  /// one `answer_batch` (a batch holds at most 1 MiB). 0 = off. At most `max_fusion_bytes`.
  std::size_t fusion_bytes = 65536;
  /// The largest `fusion_bytes`: a quarter of a batch, so that a batch holds at least 3 members.
  static constexpr std::size_t max_fusion_bytes = 262144;
  int server_engine_threads = 4;  ///< BYTEPS_SERVER_ENGINE_THREAD
  /// BYTEPS_SERVER_CHUNK_BYTES: servers only. The largest chunk in which a push is summed and
  /// answered as its bytes arrive (cut-through, server/sync_sum.hpp), instead of after the
  /// whole partition is in: about an eighth of the push, at least half this
  /// (`server::chunk_for`); a push that makes two chunks or more streams. 0 = off. A multiple
  /// of 64, at most 2^26.
  std::size_t server_chunk_bytes = 262144;
  /// BYTEPS_SERVER_LANDING_BYTES: servers on a transport that registers memory (RDMA) only. Each
  /// worker link's pushes of a partition land in one registered buffer that stays from round
  /// to round, so the worker writes later rounds there without asking (server/landing.hpp);
  /// they cost up to workers x the server's share of the model. This bounds their total: past
  /// it, pushes land in buffers taken per push and ask for their place every round. 0 = no
  /// bound.
  std::size_t server_landing_bytes = std::size_t{4} << 30;
  key_hash_fn key_hash = key_hash_fn::djb2;  ///< BYTEPS_KEY_HASH_FN
  bool mixed_mode = false;                   ///< BYTEPS_ENABLE_MIXED_MODE (see placement.hpp)
  log_level log = log_level::info;           ///< BYTEPS_LOG_LEVEL
  int local_rank = 0;                        ///< BYTEPS_LOCAL_RANK
  int local_size = 1;                        ///< BYTEPS_LOCAL_SIZE
  millis connect_timeout{30000};             ///< BYTEPS_CONNECT_TIMEOUT_MS
  millis rendezvous_timeout{120000};         ///< BYTEPS_RENDEZVOUS_TIMEOUT_MS
  millis op_timeout{60000};                  ///< BYTEPS_OP_TIMEOUT_MS
  millis heartbeat_interval{1000};           ///< BYTEPS_HEARTBEAT_INTERVAL_MS
  millis heartbeat_timeout{10000};           ///< BYTEPS_HEARTBEAT_TIMEOUT_MS
  millis stall_warning{60000};               ///< BYTEPS_STALL_WARNING_MS
  // What a stranger may cost a listener (docs/reliability.md, "Security").
  millis hello_timeout{5000};         ///< BYTEPS_HELLO_TIMEOUT_MS: a new link's hello
  int max_pending_connections = 256;  ///< BYTEPS_MAX_PENDING_CONNECTIONS (no hello yet)
  std::size_t max_name_bytes = 4096;  ///< BYTEPS_MAX_NAME_BYTES: a tensor's name
  std::size_t max_tensors = std::size_t{1} << 20;  ///< BYTEPS_MAX_TENSORS: declared, per server
  /// BYTEPS_SERVER_LOG_INTERVAL_MS: a server logs its throughput and the workers' lag at INFO
  /// this often (0: never).
  millis server_log_interval{10000};
  /// BYTEPS_FAILOVER_TIMEOUT_MS: 0 (default) = off, a lost server fails the job. Otherwise a
  /// server lost after the cluster formed is replaced (a standby, or a server restarted with its
  /// BYTEPS_SERVER_ID) if one joins within this time; see docs/reliability.md.
  millis failover_timeout{0};
  bool server_standby = false;  ///< BYTEPS_SERVER_STANDBY: wait to replace a dead server
  /// BYTEPS_TABLE_JOURNAL_DIR: servers, with failover on and embedding tables. The directory
  /// where each server journals its table shards (embedding/journal.hpp) for its replacement
  /// to replay: one every server and standby reaches. Empty: a table's declaration is refused
  /// while failover is on.
  std::string table_journal_dir;
  /// BYTEPS_ENABLE_ASYNC: asynchronous training (server/async_sum.hpp). Servers hold the
  /// parameters, seeded from rank 0's first push of each tensor; a worker pushes a delta and
  /// gets the current parameters back at once, without waiting for the other workers.
  bool enable_async = false;
  /// BYTEPS_ASYNC_STALENESS: with async on, the most pushes of a tensor a worker may be ahead of
  /// the slowest worker before its answer is held (0 = lockstep); -1 (unset) = unbounded.
  std::int64_t async_staleness = -1;
  /// BYTEPS_MIN_NUM_WORKER and BYTEPS_MAX_NUM_WORKER: elastic training (docs/reliability.md,
  /// "Elastic training"), on when either is set (0: unset). Counted in machines, as
  /// DMLC_NUM_WORKER. The job forms with DMLC_NUM_WORKER machines; a worker machine lost after
  /// that is removed and the others go on, until fewer than `min_workers` remain; a worker that
  /// starts later joins between steps while fewer than `worker_slots()` machines take part.
  int min_workers = 0;
  int max_workers = 0;

  /// BYTEPS_COMPRESSOR: workers only. The compressor of every tensor whose push_pull names none
  /// (`push_pull_options::compressor` overrides it per tensor), as a recipe's text
  /// (core/recipe_text.hpp: "topk:k=0.01", "ef_onebit:scaling=1"); "" or "none": no compression.
  /// The worker makes it with compress/registry.hpp's built-ins when it joins.
  std::string compressor;
  /// BYTEPS_MIN_COMPRESS_BYTES: a tensor smaller than this goes uncompressed whatever its
  /// compressor, as in BytePS (the encoding would cost more than it saves).
  std::size_t min_compress_bytes = 65536;

  // The environment's values for the transports' options, recorded here only because
  // from_env() is the one reader of the environment. A node given no transport options builds
  // them from these (`transport::tcp::options::from`, `transport::ipc<I>::options::from`).
  int io_threads = 1;  ///< BYTEPS_IO_THREADS (tcp_options::io_threads)
  /// BYTEPS_IO_POLL_US (tcp_options::poll_before_sleep): an I/O thread polls this long after
  /// its last event before it sleeps; 0: at once.
  std::chrono::microseconds io_poll{200};
  /// BYTEPS_WAIT_POLL_US: workers. A `handle::wait` polls its operation this long before it
  /// sleeps on it; 0: at once.
  std::chrono::microseconds wait_poll{100};
  /// BYTEPS_TCP_NOTSENT_LOWAT (tcp_options::notsent_lowat; 0: the kernel's default).
  std::size_t tcp_notsent_lowat = 262144;
  bool enable_ipc = true;  ///< BYTEPS_ENABLE_IPC (ipc_options::enabled)
  /// BYTEPS_IPC_RING_BYTES (ipc_options::ring_bytes): each shared-memory ring's size.
  std::size_t ipc_ring_bytes = std::size_t{16} << 20;
  /// The RDMA transport's variables (`transport::rdma_options::from` copies them; ranges and
  /// meanings in transport/rdma/rdma_options.hpp and docs/env.md).
  struct rdma_settings {
    std::string device;                     ///< BYTEPS_RDMA_DEVICE ("": first with port active)
    int port = 1;                           ///< BYTEPS_RDMA_PORT
    int gid_index = -1;                     ///< BYTEPS_RDMA_GID_INDEX (-1: RoCE v2 preferred)
    int rx_depth = 64;                      ///< BYTEPS_RDMA_RX_DEPTH
    int start_depth = 16;                   ///< BYTEPS_RDMA_START_DEPTH
    std::size_t staging_bytes = 256 << 10;  ///< BYTEPS_RDMA_STAGING_BYTES
    bool busy_poll = false;                 ///< BYTEPS_RDMA_BUSY_POLL
  };
  rdma_settings rdma{};  // {}: GCC 12 -O3 otherwise warns its string may be uninitialized
  /// DMLC_ENABLE_RDMA (`ibverbs` or 1): which transport a program that picks one at run time
  /// uses (byteps-server: `transport::rdma` instead of tcp). Nothing in the library reads it.
  bool enable_rdma = false;
  /// DMLC_INTERFACE: a network interface (`ib0`); a server with no `node_host` listens on and
  /// advertises its IPv4 address (core/net_interface.hpp). "": the scheduler link's address.
  std::string network_interface;

  // The timeline (detail/trace.hpp). A step is a round of the first tensor a worker push_pulls,
  // as in BytePS; steps start_step .. end_step-1 are recorded, and written at shutdown.
  bool trace_on = false;              ///< BYTEPS_TRACE_ON
  int trace_start_step = 10;          ///< BYTEPS_TRACE_START_STEP
  int trace_end_step = 20;            ///< BYTEPS_TRACE_END_STEP (first step not recorded)
  std::string trace_dir = "./trace";  ///< BYTEPS_TRACE_DIR: one JSON file per node

  /// Server failover is on (`failover_timeout` > 0).
  bool failover() const noexcept { return failover_timeout.count() > 0; }

  /// Elastic training is on (`min_workers` or `max_workers` set).
  bool elastic() const noexcept { return min_workers > 0 || max_workers > 0; }
  /// The fewest worker machines an elastic job goes on with (`min_workers`, or 1 when unset).
  int fewest_workers() const noexcept { return min_workers > 0 ? min_workers : 1; }
  /// The worker machine numbers (DMLC_WORKER_ID) a job can have, 0 .. this - 1: with elastic
  /// training up to `max_workers` (workers that join take free ones), else `num_workers`.
  int worker_slots() const noexcept { return std::max(num_workers, max_workers); }

  /// The largest partition the auto rule makes (BytePS's default partition size).
  static constexpr std::size_t auto_partition_cap = 4096000;

  /// `partition_bytes`, or the auto rule's cap when it is 0 (auto).
  std::size_t largest_partition() const noexcept {
    return partition_bytes != 0 ? partition_bytes : auto_partition_cap;
  }

  /// Largest frame payload a node accepts: a partition (rounded up to a page by the
  /// partitioner) plus room for control messages.
  std::size_t max_frame_bytes() const noexcept { return largest_partition() + 4096 + (1u << 20); }

  /// Servers: where to listen and what to tell the workers: `node_host`, else the address of
  /// `network_interface`, else `fallback` (the address of the link to the scheduler).
  std::string listen_host(const std::string& fallback) const {
    if (!node_host.empty()) return node_host;
    return network_interface.empty() ? fallback : interface_address(network_interface);
  }

  /// Throws `usage_error` naming the first field that is out of range.
  BYTEPS_DECL void validate() const;

  /// Reads the environment. Throws `usage_error` naming the variable and what it expects when
  /// a required variable is missing or any value is malformed.
  BYTEPS_DECL static Config from_env();
};

}  // namespace bps

#if BYTEPS_INCLUDE_BODIES
#include "byteps/core/impl/config.hpp"
#include "byteps/core/impl/config_from_env.hpp"
#endif
