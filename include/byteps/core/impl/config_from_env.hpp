#pragma once
/// @file
/// `Config::from_env()`: every variable read, parsed and range-checked (see core/config.hpp and
/// docs/env.md). Included at the end of core/config.hpp in header-only mode, compiled once into
/// byteps::compiled otherwise (core/linkage.hpp).

#include "byteps/core/config.hpp"

namespace bps {

Config Config::from_env() {
  using detail::env_integer;
  using detail::env_or_null;
  Config c;

  const char* r = env_or_null("DMLC_ROLE");
  if (r == nullptr) throw usage_error("DMLC_ROLE is not set: expected scheduler, server or worker");
  std::string_view rv = r;
  if (rv == "scheduler")
    c.node_role = role::scheduler;
  else if (rv == "server")
    c.node_role = role::server;
  else if (rv == "worker")
    c.node_role = role::worker;
  else
    throw usage_error(
        fmt::format("DMLC_ROLE='{}' is not valid: expected scheduler, server or worker", rv));

  c.num_workers = static_cast<int>(env_integer("DMLC_NUM_WORKER", 0, 1, 1 << 20, true));
  c.num_servers = static_cast<int>(env_integer("DMLC_NUM_SERVER", 0, 1, 1 << 20, true));
  const char* uri = env_or_null("DMLC_PS_ROOT_URI");
  if (uri == nullptr)
    throw usage_error("DMLC_PS_ROOT_URI is not set: expected the scheduler's host name or address");
  c.scheduler_host = uri;
  // Only the scheduler may take 0 (any free port): the others must know where it listens.
  const int lowest_port = c.node_role == role::scheduler ? 0 : 1;
  c.scheduler_port =
      static_cast<std::uint16_t>(env_integer("DMLC_PS_ROOT_PORT", 0, lowest_port, 65535, true));
  // Elastic training: a worker joining a running job may name a machine up to
  // BYTEPS_MAX_NUM_WORKER - 1 (read again below, where it is checked).
  const int slots = std::max(
      c.num_workers, static_cast<int>(env_integer("BYTEPS_MAX_NUM_WORKER", 0, 1, 1 << 20)));
  c.worker_id = static_cast<int>(env_integer("DMLC_WORKER_ID", -1, 0, slots - 1));
  c.server_id = static_cast<int>(env_integer("BYTEPS_SERVER_ID", -1, 0, c.num_servers - 1));
  if (const char* h = env_or_null("DMLC_NODE_HOST")) c.node_host = h;
  if (const char* t = env_or_null("BYTEPS_JOB_TOKEN")) c.job_token = t;
  if (const char* f = env_or_null("BYTEPS_TLS_CA")) c.tls_ca = f;
  if (const char* f = env_or_null("BYTEPS_TLS_CERT")) c.tls_cert = f;
  if (const char* f = env_or_null("BYTEPS_TLS_KEY")) c.tls_key = f;
  c.server_port = static_cast<std::uint16_t>(env_integer("BYTEPS_SERVER_PORT", 0, 0, 65535));
  c.partition_bytes =
      static_cast<std::size_t>(env_integer("BYTEPS_PARTITION_BYTES", 0, 0, std::int64_t{1} << 31));
  if (c.partition_bytes != 0 && c.partition_bytes < 4096)
    throw usage_error(
        fmt::format("BYTEPS_PARTITION_BYTES='{}' is not valid: expected 0 or unset "
                    "(auto) or a whole number from 4096 to 2147483648",
                    env_or_null("BYTEPS_PARTITION_BYTES")));
  c.scheduling_credit = static_cast<int>(env_integer("BYTEPS_SCHEDULING_CREDIT", 4, 0, 1 << 20));
  c.scheduling_by_priority = env_integer("BYTEPS_SCHEDULING_PRIORITY", 0, 0, 1) == 1;
  c.fusion_bytes = static_cast<std::size_t>(env_integer(
      "BYTEPS_FUSION_BYTES", 65536, 0, static_cast<std::int64_t>(Config::max_fusion_bytes)));
  c.server_engine_threads = static_cast<int>(env_integer("BYTEPS_SERVER_ENGINE_THREAD", 4, 1, 256));
  c.server_chunk_bytes = static_cast<std::size_t>(
      env_integer("BYTEPS_SERVER_CHUNK_BYTES", 262144, 0, std::int64_t{1} << 26));
  if (c.server_chunk_bytes % 64 != 0)
    throw usage_error(
        fmt::format("BYTEPS_SERVER_CHUNK_BYTES='{}' is not valid: expected 0 (off) "
                    "or a multiple of 64 up to 67108864",
                    env_or_null("BYTEPS_SERVER_CHUNK_BYTES")));
  c.server_landing_bytes = static_cast<std::size_t>(
      env_integer("BYTEPS_SERVER_LANDING_BYTES", std::int64_t{4} << 30, 0, std::int64_t{1} << 50));
  c.io_threads = static_cast<int>(env_integer("BYTEPS_IO_THREADS", 1, 1, 64));
  c.io_poll = std::chrono::microseconds(env_integer("BYTEPS_IO_POLL_US", 200, 0, 100000));
  c.wait_poll = std::chrono::microseconds(env_integer("BYTEPS_WAIT_POLL_US", 100, 0, 100000));
  c.tcp_notsent_lowat = static_cast<std::size_t>(
      env_integer("BYTEPS_TCP_NOTSENT_LOWAT", 262144, 0, std::int64_t{1} << 30));
  c.mixed_mode = env_integer("BYTEPS_ENABLE_MIXED_MODE", 0, 0, 1) == 1;
  c.enable_ipc = env_integer("BYTEPS_ENABLE_IPC", 1, 0, 1) == 1;
  c.ipc_ring_bytes =
      static_cast<std::size_t>(env_integer("BYTEPS_IPC_RING_BYTES", std::int64_t{16} << 20,
                                           std::int64_t{1} << 20, std::int64_t{1} << 40));
  if (const char* e = env_or_null("DMLC_ENABLE_RDMA")) {
    const std::string_view v = e;
    if (v == "ibverbs" || v == "1")
      c.enable_rdma = true;
    else if (v != "0")
      throw usage_error(
          fmt::format("DMLC_ENABLE_RDMA='{}' is not valid: expected ibverbs or 1 "
                      "(the RDMA transport), or 0 or unset (TCP)",
                      v));
  }
  if (const char* d = env_or_null("BYTEPS_RDMA_DEVICE")) c.rdma.device = d;
  c.rdma.port = static_cast<int>(env_integer("BYTEPS_RDMA_PORT", 1, 1, 255));
  c.rdma.gid_index = static_cast<int>(env_integer("BYTEPS_RDMA_GID_INDEX", -1, 0, 255));
  c.rdma.rx_depth = static_cast<int>(env_integer("BYTEPS_RDMA_RX_DEPTH", 64, 4, 16384));
  c.rdma.start_depth = static_cast<int>(env_integer("BYTEPS_RDMA_START_DEPTH", 16, 2, 16384));
  c.rdma.staging_bytes = static_cast<std::size_t>(
      env_integer("BYTEPS_RDMA_STAGING_BYTES", 256 << 10, 4096, std::int64_t{1} << 30));
  c.rdma.busy_poll = env_integer("BYTEPS_RDMA_BUSY_POLL", 0, 0, 1) == 1;
  if (const char* i = env_or_null("DMLC_INTERFACE")) {
    c.network_interface = i;
    (void)interface_address(c.network_interface);  // checked now: a usage_error names the variable
  }
  c.local_size = static_cast<int>(env_integer("BYTEPS_LOCAL_SIZE", 1, 1, 1024));
  c.local_rank = static_cast<int>(env_integer("BYTEPS_LOCAL_RANK", 0, 0, c.local_size - 1));
  c.connect_timeout = millis(env_integer("BYTEPS_CONNECT_TIMEOUT_MS", 30000, 1, 86400000));
  c.rendezvous_timeout = millis(env_integer("BYTEPS_RENDEZVOUS_TIMEOUT_MS", 120000, 1, 86400000));
  c.op_timeout = millis(env_integer("BYTEPS_OP_TIMEOUT_MS", 60000, 1, 86400000));
  c.heartbeat_interval = millis(env_integer("BYTEPS_HEARTBEAT_INTERVAL_MS", 1000, 10, 3600000));
  c.heartbeat_timeout = millis(env_integer("BYTEPS_HEARTBEAT_TIMEOUT_MS", 10000, 20, 86400000));
  c.stall_warning = millis(env_integer("BYTEPS_STALL_WARNING_MS", 60000, 1, 86400000));
  c.hello_timeout = millis(env_integer("BYTEPS_HELLO_TIMEOUT_MS", 5000, 1, 3600000));
  c.max_pending_connections =
      static_cast<int>(env_integer("BYTEPS_MAX_PENDING_CONNECTIONS", 256, 1, 1 << 20));
  c.max_name_bytes = static_cast<std::size_t>(env_integer("BYTEPS_MAX_NAME_BYTES", 4096, 1, 4096));
  c.max_tensors = static_cast<std::size_t>(
      env_integer("BYTEPS_MAX_TENSORS", 1 << 20, 1, std::int64_t{1} << 32));
  c.server_log_interval = millis(env_integer("BYTEPS_SERVER_LOG_INTERVAL_MS", 10000, 0, 86400000));
  c.failover_timeout = millis(env_integer("BYTEPS_FAILOVER_TIMEOUT_MS", 0, 0, 86400000));
  c.server_standby = env_integer("BYTEPS_SERVER_STANDBY", 0, 0, 1) == 1;
  c.enable_async = env_integer("BYTEPS_ENABLE_ASYNC", 0, 0, 1) == 1;
  c.async_staleness = env_integer("BYTEPS_ASYNC_STALENESS", -1, 0, std::int64_t{1} << 40);
  c.min_workers = static_cast<int>(env_integer("BYTEPS_MIN_NUM_WORKER", 0, 1, 1 << 20));
  c.max_workers = static_cast<int>(env_integer("BYTEPS_MAX_NUM_WORKER", 0, 1, 1 << 20));
  if (const char* z = env_or_null("BYTEPS_COMPRESSOR")) {
    detail::parse_recipe_text(z, "BYTEPS_COMPRESSOR");  // the form only: the worker makes it
    c.compressor = z;
  }
  c.min_compress_bytes = static_cast<std::size_t>(
      env_integer("BYTEPS_MIN_COMPRESS_BYTES", 65536, 0, std::int64_t{1} << 40));
  c.trace_on = env_integer("BYTEPS_TRACE_ON", 0, 0, 1) == 1;
  c.trace_start_step = static_cast<int>(env_integer("BYTEPS_TRACE_START_STEP", 10, 0, 1 << 30));
  c.trace_end_step = static_cast<int>(env_integer("BYTEPS_TRACE_END_STEP", 20, 0, 1 << 30));
  if (c.trace_end_step < c.trace_start_step)
    throw usage_error(
        fmt::format("BYTEPS_TRACE_END_STEP={} is not valid: expected at least "
                    "BYTEPS_TRACE_START_STEP={} (steps START .. END-1 are traced)",
                    c.trace_end_step, c.trace_start_step));
  if (const char* d = env_or_null("BYTEPS_TRACE_DIR")) c.trace_dir = d;
  if (const char* d = env_or_null("BYTEPS_TABLE_JOURNAL_DIR")) c.table_journal_dir = d;

  if (const char* h = env_or_null("BYTEPS_KEY_HASH_FN")) {
    std::string_view v = h;
    if (v == "djb2")
      c.key_hash = key_hash_fn::djb2;
    else if (v == "sdbm")
      c.key_hash = key_hash_fn::sdbm;
    else if (v == "naive")
      c.key_hash = key_hash_fn::naive;
    else if (v == "built_in")
      c.key_hash = key_hash_fn::built_in;
    else
      throw usage_error(fmt::format(
          "BYTEPS_KEY_HASH_FN='{}' is not valid: expected djb2, sdbm, naive or built_in", v));
  }
  if (const char* l = env_or_null("BYTEPS_LOG_LEVEL")) {
    std::string v = l;
    for (auto& ch : v) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (v == "TRACE")
      c.log = log_level::trace;
    else if (v == "DEBUG")
      c.log = log_level::debug;
    else if (v == "INFO")
      c.log = log_level::info;
    else if (v == "WARNING" || v == "WARN")
      c.log = log_level::warning;
    else if (v == "ERROR")
      c.log = log_level::error;
    else if (v == "OFF" || v == "FATAL")
      c.log = log_level::off;
    else
      throw usage_error(fmt::format(
          "BYTEPS_LOG_LEVEL='{}' is not valid: expected TRACE, DEBUG, INFO, WARNING, ERROR or OFF",
          l));
  }
  c.validate();
  return c;
}

}  // namespace bps
