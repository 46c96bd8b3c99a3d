#pragma once
// The environment as Config::from_env() sees it, for the config tests: every variable it reads,
// a guard that clears them, and the messages of what it refuses.

#include <byteps/core/config.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <exception>
#include <string>

namespace config_test {

// Every variable Config::from_env() reads (core/impl/config_from_env.hpp);
// test_config_limits.cpp checks the list against that file.
inline constexpr const char* all_variables[] = {
    "DMLC_ROLE",
    "DMLC_NUM_WORKER",
    "DMLC_NUM_SERVER",
    "DMLC_PS_ROOT_URI",
    "DMLC_PS_ROOT_PORT",
    "DMLC_WORKER_ID",
    "BYTEPS_SERVER_ID",
    "DMLC_NODE_HOST",
    "BYTEPS_SERVER_PORT",
    "BYTEPS_JOB_TOKEN",
    "BYTEPS_PARTITION_BYTES",
    "BYTEPS_SCHEDULING_CREDIT",
    "BYTEPS_SCHEDULING_PRIORITY",
    "BYTEPS_SERVER_ENGINE_THREAD",
    "BYTEPS_SERVER_CHUNK_BYTES",
    "BYTEPS_SERVER_LANDING_BYTES",
    "BYTEPS_FUSION_BYTES",
    "BYTEPS_IO_THREADS",
    "BYTEPS_IO_POLL_US",
    "BYTEPS_WAIT_POLL_US",
    "BYTEPS_TCP_NOTSENT_LOWAT",
    "BYTEPS_ENABLE_MIXED_MODE",
    "BYTEPS_ENABLE_IPC",
    "BYTEPS_IPC_RING_BYTES",
    "BYTEPS_LOCAL_SIZE",
    "BYTEPS_LOCAL_RANK",
    "BYTEPS_CONNECT_TIMEOUT_MS",
    "BYTEPS_RENDEZVOUS_TIMEOUT_MS",
    "BYTEPS_OP_TIMEOUT_MS",
    "BYTEPS_HEARTBEAT_INTERVAL_MS",
    "BYTEPS_HEARTBEAT_TIMEOUT_MS",
    "BYTEPS_STALL_WARNING_MS",
    "BYTEPS_HELLO_TIMEOUT_MS",
    "BYTEPS_MAX_PENDING_CONNECTIONS",
    "BYTEPS_MAX_NAME_BYTES",
    "BYTEPS_MAX_TENSORS",
    "BYTEPS_KEY_HASH_FN",
    "BYTEPS_LOG_LEVEL",
    "BYTEPS_FAILOVER_TIMEOUT_MS",
    "BYTEPS_SERVER_STANDBY",
    "BYTEPS_TABLE_JOURNAL_DIR",
    "BYTEPS_ENABLE_ASYNC",
    "BYTEPS_ASYNC_STALENESS",
    "BYTEPS_MIN_NUM_WORKER",
    "BYTEPS_MAX_NUM_WORKER",
    "BYTEPS_SERVER_LOG_INTERVAL_MS",
    "BYTEPS_TRACE_ON",
    "BYTEPS_TRACE_START_STEP",
    "BYTEPS_TRACE_END_STEP",
    "BYTEPS_TRACE_DIR",
    "BYTEPS_COMPRESSOR",
    "BYTEPS_MIN_COMPRESS_BYTES",
    "DMLC_ENABLE_RDMA",
    "DMLC_INTERFACE",
    "BYTEPS_RDMA_DEVICE",
    "BYTEPS_RDMA_PORT",
    "BYTEPS_RDMA_GID_INDEX",
    "BYTEPS_RDMA_RX_DEPTH",
    "BYTEPS_RDMA_START_DEPTH",
    "BYTEPS_RDMA_STAGING_BYTES",
    "BYTEPS_RDMA_BUSY_POLL",
    "BYTEPS_TLS_CA",
    "BYTEPS_TLS_CERT",
    "BYTEPS_TLS_KEY",
};

inline void clear_env() {
  for (const char* v : all_variables) ::unsetenv(v);
}

// Clears the environment when built and when destroyed, so that no test case sees another's.
struct clean_env {
  clean_env() { clear_env(); }
  ~clean_env() { clear_env(); }
  clean_env(const clean_env&) = delete;
  clean_env& operator=(const clean_env&) = delete;
};

inline void set(const char* name, const char* value) { REQUIRE(::setenv(name, value, 1) == 0); }

inline void set_required() {
  set("DMLC_ROLE", "worker");
  set("DMLC_NUM_WORKER", "2");
  set("DMLC_NUM_SERVER", "1");
  set("DMLC_PS_ROOT_URI", "10.0.0.1");
  set("DMLC_PS_ROOT_PORT", "9000");
}

// Runs from_env() expecting usage_error; returns its message.
inline std::string from_env_error() {
  try {
    (void)bps::Config::from_env();
  } catch (const bps::usage_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("wrong exception type: " << e.what());
  }
  FAIL("from_env() did not throw");
  return {};
}

inline std::string validate_error(const bps::Config& c) {
  try {
    c.validate();
  } catch (const bps::usage_error& e) {
    return e.what();
  }
  FAIL("validate() did not throw");
  return {};
}

}  // namespace config_test
