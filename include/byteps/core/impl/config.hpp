#pragma once
/// @file
/// `Config::validate()`: inline in header-only mode, compiled once into byteps::compiled
/// otherwise (core/linkage.hpp). Included at the end of core/config.hpp.

namespace bps {

void Config::validate() const {
  auto fail = [](std::string_view what, auto value, std::string_view expected) {
    throw usage_error(
        fmt::format("Config: {} = {} is not valid: expected {}", what, value, expected));
  };
  if (num_workers < 1) fail("num_workers (DMLC_NUM_WORKER)", num_workers, ">= 1");
  if (num_servers < 1) fail("num_servers (DMLC_NUM_SERVER)", num_servers, ">= 1");
  if (worker_id < -1 || worker_id >= worker_slots())
    fail("worker_id (DMLC_WORKER_ID)", worker_id,
         max_workers > num_workers ? "-1 (assigned) or 0 .. max_workers-1 (BYTEPS_MAX_NUM_WORKER)"
                                   : "-1 (assigned) or 0 .. num_workers-1");
  if (partition_bytes != 0 && (partition_bytes < 4096 || partition_bytes > (std::size_t{1} << 31)))
    fail("partition_bytes (BYTEPS_PARTITION_BYTES)", partition_bytes, "0 (auto) or 4096 .. 2^31");
  if (scheduling_credit < 0)
    fail("scheduling_credit (BYTEPS_SCHEDULING_CREDIT)", scheduling_credit, ">= 0");
  if (fusion_bytes > max_fusion_bytes)
    fail("fusion_bytes (BYTEPS_FUSION_BYTES)", fusion_bytes, "0 (off) .. 262144");
  if (server_engine_threads < 1 || server_engine_threads > 256)
    fail("server_engine_threads (BYTEPS_SERVER_ENGINE_THREAD)", server_engine_threads, "1 .. 256");
  if (server_chunk_bytes % 64 != 0 || server_chunk_bytes > (std::size_t{1} << 26))
    fail("server_chunk_bytes (BYTEPS_SERVER_CHUNK_BYTES)", server_chunk_bytes,
         "0 (off) or a multiple of 64 up to 2^26");
  if (io_threads < 1 || io_threads > 64)
    fail("io_threads (BYTEPS_IO_THREADS)", io_threads, "1 .. 64");
  if (io_poll.count() < 0 || io_poll.count() > 100000)
    fail("io_poll (BYTEPS_IO_POLL_US)", io_poll.count(), "0 .. 100000 microseconds");
  if (wait_poll.count() < 0 || wait_poll.count() > 100000)
    fail("wait_poll (BYTEPS_WAIT_POLL_US)", wait_poll.count(), "0 .. 100000 microseconds");
  if (tcp_notsent_lowat > (std::size_t{1} << 30))
    fail("tcp_notsent_lowat (BYTEPS_TCP_NOTSENT_LOWAT)", tcp_notsent_lowat, "0 (off) .. 2^30");
  if (ipc_ring_bytes < (std::size_t{1} << 20) || ipc_ring_bytes > (std::size_t{1} << 40))
    fail("ipc_ring_bytes (BYTEPS_IPC_RING_BYTES)", ipc_ring_bytes, "2^20 .. 2^40");
  if (rdma.port < 1 || rdma.port > 255) fail("rdma.port (BYTEPS_RDMA_PORT)", rdma.port, "1 .. 255");
  if (rdma.gid_index < -1 || rdma.gid_index > 255)
    fail("rdma.gid_index (BYTEPS_RDMA_GID_INDEX)", rdma.gid_index, "-1 (RoCE v2 preferred) .. 255");
  if (rdma.rx_depth < 4 || rdma.rx_depth > 16384)
    fail("rdma.rx_depth (BYTEPS_RDMA_RX_DEPTH)", rdma.rx_depth, "4 .. 16384");
  if (rdma.start_depth < 2 || rdma.start_depth > 16384)
    fail("rdma.start_depth (BYTEPS_RDMA_START_DEPTH)", rdma.start_depth, "2 .. 16384");
  if (rdma.staging_bytes < 4096 || rdma.staging_bytes > (std::size_t{1} << 30))
    fail("rdma.staging_bytes (BYTEPS_RDMA_STAGING_BYTES)", rdma.staging_bytes, "4096 .. 2^30");
  if (mixed_mode && num_servers <= num_workers)
    fail("num_servers (DMLC_NUM_SERVER)", num_servers,
         "more than num_workers (DMLC_NUM_WORKER) with mixed_mode (BYTEPS_ENABLE_MIXED_MODE): a "
         "colocated server per machine plus at least one CPU-only server");
  if (server_id < -1 || server_id >= num_servers)
    fail("server_id (BYTEPS_SERVER_ID)", server_id, "-1 (assigned) or 0 .. num_servers-1");
  if (local_size < 1) fail("local_size (BYTEPS_LOCAL_SIZE)", local_size, ">= 1");
  if (local_rank < 0 || local_rank >= local_size)
    fail("local_rank (BYTEPS_LOCAL_RANK)", local_rank, "0 .. local_size-1");
  if (node_role == role::worker && local_size > 1 && worker_id < 0)
    fail("worker_id (DMLC_WORKER_ID)", worker_id,
         "the machine's index 0 .. num_workers-1 when local_size (BYTEPS_LOCAL_SIZE) > 1, so "
         "that the local ranks of one machine find each other");
  if (scheduler_host.empty())
    fail("scheduler_host (DMLC_PS_ROOT_URI)", "\"\"", "a host name or address");
  if (connect_timeout.count() <= 0)
    fail("connect_timeout (BYTEPS_CONNECT_TIMEOUT_MS)", connect_timeout.count(), "> 0");
  if (rendezvous_timeout.count() <= 0)
    fail("rendezvous_timeout (BYTEPS_RENDEZVOUS_TIMEOUT_MS)", rendezvous_timeout.count(), "> 0");
  if (op_timeout.count() <= 0) fail("op_timeout (BYTEPS_OP_TIMEOUT_MS)", op_timeout.count(), "> 0");
  if (heartbeat_interval.count() < 10)
    fail("heartbeat_interval (BYTEPS_HEARTBEAT_INTERVAL_MS)", heartbeat_interval.count(), ">= 10");
  if (heartbeat_timeout <= heartbeat_interval)
    fail("heartbeat_timeout (BYTEPS_HEARTBEAT_TIMEOUT_MS)", heartbeat_timeout.count(),
         "more than heartbeat_interval (BYTEPS_HEARTBEAT_INTERVAL_MS)");
  if (stall_warning.count() <= 0)
    fail("stall_warning (BYTEPS_STALL_WARNING_MS)", stall_warning.count(), "> 0");
  if (hello_timeout.count() <= 0)
    fail("hello_timeout (BYTEPS_HELLO_TIMEOUT_MS)", hello_timeout.count(), "> 0");
  if (max_pending_connections < 1)
    fail("max_pending_connections (BYTEPS_MAX_PENDING_CONNECTIONS)", max_pending_connections,
         ">= 1");
  if (max_name_bytes < 1 || max_name_bytes > 4096)
    fail("max_name_bytes (BYTEPS_MAX_NAME_BYTES)", max_name_bytes, "1 .. 4096");
  if (max_tensors < 1) fail("max_tensors (BYTEPS_MAX_TENSORS)", max_tensors, ">= 1");
  if (server_log_interval.count() < 0)
    fail("server_log_interval (BYTEPS_SERVER_LOG_INTERVAL_MS)", server_log_interval.count(),
         "0 (off) or more");
  if (failover_timeout.count() < 0)
    fail("failover_timeout (BYTEPS_FAILOVER_TIMEOUT_MS)", failover_timeout.count(),
         "0 (off) or more");
  if (async_staleness < -1)
    fail("async_staleness (BYTEPS_ASYNC_STALENESS)", async_staleness, "-1 (unbounded) or >= 0");
  if (async_staleness >= 0 && !enable_async)
    fail("async_staleness (BYTEPS_ASYNC_STALENESS)", async_staleness,
         "unset (-1) unless enable_async (BYTEPS_ENABLE_ASYNC=1): staleness bounds async training "
         "only");
  // Async mode seeds each tensor from rank 0's first push and adds every later push as it is;
  // a machine's local ranks would each push its own copy of the parameters (summed by the
  // local stage), so the seed would be local_size times the parameters.
  if (enable_async && local_size > 1)
    fail("local_size (BYTEPS_LOCAL_SIZE)", local_size,
         "1 with enable_async (BYTEPS_ENABLE_ASYNC=1): async training runs one worker process "
         "per machine (the local stage's sum would multiply the seeded parameters)");
  if (!compressor.empty() && compressor != "none") {
    try {
      detail::parse_recipe_text(compressor, "BYTEPS_COMPRESSOR");
    } catch (const usage_error& e) {
      fail("compressor (BYTEPS_COMPRESSOR)", fmt::format("'{}'", compressor), e.what());
    }
    if (enable_async)
      fail("compressor (BYTEPS_COMPRESSOR)", fmt::format("'{}'", compressor),
           "none with enable_async (BYTEPS_ENABLE_ASYNC=1): async servers (server::async_sum) "
           "add pushes as they come and do not decode compressed ones");
    if (failover())
      fail("compressor (BYTEPS_COMPRESSOR)", fmt::format("'{}'", compressor),
           "none while failover is on (BYTEPS_FAILOVER_TIMEOUT_MS > 0): a replacement server "
           "cannot rebuild the dead one's error feedback, so compression that the servers "
           "decode does not fail over yet");
  }
  if (min_workers < 0 || min_workers > num_workers)
    fail("min_workers (BYTEPS_MIN_NUM_WORKER)", min_workers,
         fmt::format("0 (unset) or 1 .. num_workers (DMLC_NUM_WORKER) = {}: the job forms with "
                     "DMLC_NUM_WORKER machines",
                     num_workers));
  if (max_workers != 0 && (max_workers < num_workers || max_workers > (1 << 20)))
    fail("max_workers (BYTEPS_MAX_NUM_WORKER)", max_workers,
         fmt::format("0 (unset) or num_workers (DMLC_NUM_WORKER) = {} .. 1048576", num_workers));
  if (elastic()) {
    // What elastic training does not cover yet: each refused by name, never half-supported.
    auto not_yet = [&](std::string_view what, auto value, std::string_view why) {
      fail(what, value,
           fmt::format("{} with elastic training (BYTEPS_MIN_NUM_WORKER or "
                       "BYTEPS_MAX_NUM_WORKER set): {}",
                       why, "not supported yet (docs/reliability.md, \"Elastic training\")"));
    };
    // Asynchronous training's offers carry each worker's applied count, which a replacement
    // would have to take over the members only: not designed yet.
    if (failover() && enable_async)
      not_yet("failover_timeout (BYTEPS_FAILOVER_TIMEOUT_MS)", failover_timeout.count(),
              "0 in asynchronous mode (BYTEPS_ENABLE_ASYNC)");
    if (mixed_mode) not_yet("mixed_mode (BYTEPS_ENABLE_MIXED_MODE)", 1, "0");
  }
  if (trace_start_step < 0)
    fail("trace_start_step (BYTEPS_TRACE_START_STEP)", trace_start_step, ">= 0");
  if (trace_end_step < trace_start_step)
    fail("trace_end_step (BYTEPS_TRACE_END_STEP)", trace_end_step,
         fmt::format("at least trace_start_step (BYTEPS_TRACE_START_STEP) = {}", trace_start_step));
  if (trace_on && trace_dir.empty())
    fail("trace_dir (BYTEPS_TRACE_DIR)", "\"\"", "a folder for the timeline's files");
  if (node_role == role::server && server_standby && !failover())
    fail("server_standby (BYTEPS_SERVER_STANDBY)", 1,
         "0 unless failover is on: set failover_timeout (BYTEPS_FAILOVER_TIMEOUT_MS) > 0 on every "
         "node");
  if (node_role == role::server && server_standby && server_id >= 0)
    fail("server_id (BYTEPS_SERVER_ID)", server_id,
         "-1 on a standby server (BYTEPS_SERVER_STANDBY=1), which takes the rank of whichever "
         "server dies");
}

}  // namespace bps
