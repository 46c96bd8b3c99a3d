#include <byteps/core/config.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config_env.hpp"
#include "wire_helpers.hpp"

namespace {

using bps_test::contains;
using namespace config_test;
using namespace std::chrono_literals;

}  // namespace

TEST_CASE("Config::from_env reads a full environment", "[config]") {
  clean_env guard;
  set("DMLC_ROLE", "server");
  set("DMLC_NUM_WORKER", "8");
  set("DMLC_NUM_SERVER", "11");  // 8 colocated + 3 CPU-only (mixed mode)
  set("DMLC_PS_ROOT_URI", "scheduler.cluster.local");
  set("DMLC_PS_ROOT_PORT", "12345");
  set("DMLC_WORKER_ID", "7");
  set("BYTEPS_SERVER_ID", "2");
  set("DMLC_NODE_HOST", "192.168.1.20");
  set("BYTEPS_SERVER_PORT", "23456");
  set("BYTEPS_PARTITION_BYTES", "8192000");
  set("BYTEPS_SCHEDULING_CREDIT", "6");
  set("BYTEPS_SCHEDULING_PRIORITY", "1");
  set("BYTEPS_SERVER_ENGINE_THREAD", "12");
  set("BYTEPS_SERVER_CHUNK_BYTES", "65536");
  set("BYTEPS_IO_THREADS", "3");
  set("BYTEPS_IO_POLL_US", "0");
  set("BYTEPS_WAIT_POLL_US", "2500");
  set("BYTEPS_TCP_NOTSENT_LOWAT", "131072");
  set("BYTEPS_ENABLE_MIXED_MODE", "1");
  set("BYTEPS_ENABLE_IPC", "0");
  set("BYTEPS_IPC_RING_BYTES", "33554432");
  set("BYTEPS_LOCAL_SIZE", "4");
  set("BYTEPS_LOCAL_RANK", "3");
  set("BYTEPS_CONNECT_TIMEOUT_MS", "1500");
  set("BYTEPS_RENDEZVOUS_TIMEOUT_MS", "250000");
  set("BYTEPS_OP_TIMEOUT_MS", "7000");
  set("BYTEPS_KEY_HASH_FN", "sdbm");
  set("BYTEPS_LOG_LEVEL", "debug");

  const auto c = bps::Config::from_env();
  CHECK(c.node_role == bps::role::server);
  CHECK(c.num_workers == 8);
  CHECK(c.num_servers == 11);
  CHECK(c.scheduler_host == "scheduler.cluster.local");
  CHECK(c.scheduler_port == 12345);
  CHECK(c.worker_id == 7);
  CHECK(c.server_id == 2);
  CHECK(c.node_host == "192.168.1.20");
  CHECK(c.server_port == 23456);
  CHECK(c.partition_bytes == 8192000);
  CHECK(c.scheduling_credit == 6);
  CHECK(c.scheduling_by_priority);
  CHECK(c.server_engine_threads == 12);
  CHECK(c.server_chunk_bytes == 65536);
  CHECK(c.io_threads == 3);
  CHECK(c.io_poll == std::chrono::microseconds(0));
  CHECK(c.wait_poll == std::chrono::microseconds(2500));
  CHECK(c.tcp_notsent_lowat == 131072);
  CHECK(c.mixed_mode);
  CHECK_FALSE(c.enable_ipc);
  CHECK(c.ipc_ring_bytes == 33554432);
  CHECK(c.local_size == 4);
  CHECK(c.local_rank == 3);
  CHECK(c.connect_timeout == 1500ms);
  CHECK(c.rendezvous_timeout == 250000ms);
  CHECK(c.op_timeout == 7000ms);
  CHECK(c.key_hash == bps::key_hash_fn::sdbm);
  CHECK(c.log == bps::log_level::debug);
  CHECK(c.max_frame_bytes() == 8192000 + 4096 + (1u << 20));  // a partition rounded up to a page
}

TEST_CASE("Config::from_env reads each role and key hash", "[config]") {
  clean_env guard;
  set_required();
  const std::pair<const char*, bps::role> roles[] = {
      {"scheduler", bps::role::scheduler}, {"server", bps::role::server}, {"worker", bps::role::worker}};
  for (const auto& [text, r] : roles) {
    set("DMLC_ROLE", text);
    CHECK(bps::Config::from_env().node_role == r);
  }
  const std::pair<const char*, bps::key_hash_fn> fns[] = {{"djb2", bps::key_hash_fn::djb2},
                                                          {"sdbm", bps::key_hash_fn::sdbm},
                                                          {"naive", bps::key_hash_fn::naive},
                                                          {"built_in", bps::key_hash_fn::built_in}};
  for (const auto& [text, f] : fns) {
    set("BYTEPS_KEY_HASH_FN", text);
    CHECK(bps::Config::from_env().key_hash == f);
  }
}

TEST_CASE("Config::from_env reads the log level case-insensitively", "[config]") {
  clean_env guard;
  set_required();
  const std::pair<const char*, bps::log_level> levels[] = {
      {"TRACE", bps::log_level::trace}, {"trace", bps::log_level::trace},
      {"Debug", bps::log_level::debug}, {"info", bps::log_level::info},
      {"INFO", bps::log_level::info},   {"warning", bps::log_level::warning},
      {"Warn", bps::log_level::warning}, {"eRRoR", bps::log_level::error},
      {"off", bps::log_level::off},     {"FATAL", bps::log_level::off},
  };
  for (const auto& [text, l] : levels) {
    CAPTURE(text);
    set("BYTEPS_LOG_LEVEL", text);
    CHECK(bps::Config::from_env().log == l);
  }
  set("BYTEPS_LOG_LEVEL", "Verbose");
  const auto msg = from_env_error();
  CAPTURE(msg);
  CHECK(contains(msg, "BYTEPS_LOG_LEVEL"));
  CHECK(contains(msg, "'Verbose'"));
}

TEST_CASE("Config::from_env defaults for unset optional variables", "[config]") {
  clean_env guard;
  set_required();
  const auto c = bps::Config::from_env();
  CHECK(c.node_role == bps::role::worker);
  CHECK(c.num_workers == 2);
  CHECK(c.num_servers == 1);
  CHECK(c.scheduler_host == "10.0.0.1");
  CHECK(c.scheduler_port == 9000);
  CHECK(c.worker_id == -1);
  CHECK(c.node_host.empty());
  CHECK(c.server_port == 0);
  CHECK(c.partition_bytes == 0);  // auto
  CHECK(c.largest_partition() == bps::Config::auto_partition_cap);
  CHECK(c.max_frame_bytes() == 4096000 + 4096 + (1u << 20));
  CHECK(c.scheduling_credit == 4);
  CHECK_FALSE(c.scheduling_by_priority);
  CHECK(c.server_engine_threads == 4);
  CHECK(c.io_threads == 1);
  CHECK(c.io_poll == std::chrono::microseconds(200));
  CHECK(c.wait_poll == std::chrono::microseconds(100));
  CHECK(c.tcp_notsent_lowat == 262144);
  CHECK_FALSE(c.mixed_mode);
  CHECK(c.enable_ipc);
  CHECK(c.local_size == 1);
  CHECK(c.local_rank == 0);
  CHECK(c.key_hash == bps::key_hash_fn::djb2);
  CHECK(c.log == bps::log_level::info);
  CHECK(c.connect_timeout == 30000ms);
  CHECK(c.rendezvous_timeout == 120000ms);
  CHECK(c.op_timeout == 60000ms);
  CHECK(c.failover_timeout == 0ms);
  CHECK_FALSE(c.failover());
  CHECK_FALSE(c.server_standby);

  // an empty value counts as unset
  set("BYTEPS_PARTITION_BYTES", "");
  set("BYTEPS_KEY_HASH_FN", "");
  const auto e = bps::Config::from_env();
  CHECK(e.partition_bytes == 0);
  CHECK(e.key_hash == bps::key_hash_fn::djb2);
}

TEST_CASE("Config::from_env accepts the bounds of each range", "[config]") {
  clean_env guard;
  set_required();
  set("DMLC_PS_ROOT_PORT", "65535");
  set("DMLC_WORKER_ID", "1");
  set("BYTEPS_PARTITION_BYTES", "4096");
  set("BYTEPS_SCHEDULING_CREDIT", "0");
  set("BYTEPS_SERVER_ENGINE_THREAD", "256");
  const auto c = bps::Config::from_env();
  CHECK(c.scheduler_port == 65535);
  CHECK(c.worker_id == 1);
  CHECK(c.partition_bytes == 4096);
  CHECK(c.scheduling_credit == 0);
  CHECK(c.server_engine_threads == 256);

  set("DMLC_PS_ROOT_PORT", "1");
  set("DMLC_WORKER_ID", "0");
  set("BYTEPS_PARTITION_BYTES", "2147483648");
  const auto d = bps::Config::from_env();
  CHECK(d.scheduler_port == 1);
  CHECK(d.worker_id == 0);
  CHECK(d.partition_bytes == (std::size_t{1} << 31));
  CHECK(d.max_frame_bytes() == (std::size_t{1} << 31) + 4096 + (1u << 20));

  set("BYTEPS_PARTITION_BYTES", "0");  // auto, as unset
  CHECK(bps::Config::from_env().partition_bytes == 0);
  set("BYTEPS_PARTITION_BYTES", "1000");
  CHECK(from_env_error() ==
        "BYTEPS_PARTITION_BYTES='1000' is not valid: expected 0 or unset (auto) or a whole number "
        "from 4096 to 2147483648");

  set("BYTEPS_PARTITION_BYTES", "0");

  CHECK(bps::Config::from_env().server_chunk_bytes == 262144);  // unset: the default
  set("BYTEPS_SERVER_CHUNK_BYTES", "0");  // off
  CHECK(bps::Config::from_env().server_chunk_bytes == 0);
  set("BYTEPS_SERVER_CHUNK_BYTES", "67108864");
  CHECK(bps::Config::from_env().server_chunk_bytes == (std::size_t{1} << 26));
  set("BYTEPS_SERVER_CHUNK_BYTES", "1000");
  CHECK(from_env_error() ==
        "BYTEPS_SERVER_CHUNK_BYTES='1000' is not valid: expected 0 (off) or a multiple of 64 up "
        "to 67108864");
}

TEST_CASE("Config::from_env names each missing required variable", "[config]") {
  clean_env guard;
  for (const char* missing :
       {"DMLC_ROLE", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"}) {
    CAPTURE(missing);
    set_required();
    REQUIRE_NOTHROW(bps::Config::from_env());
    ::unsetenv(missing);
    auto msg = from_env_error();
    CAPTURE(msg);
    CHECK(contains(msg, missing));
    CHECK(contains(msg, "not set"));

    // set but empty is missing too
    set(missing, "");
    msg = from_env_error();
    CHECK(contains(msg, missing));
    CHECK(contains(msg, "not set"));
  }
}

TEST_CASE("Config::from_env refuses malformed values, naming the variable and quoting the value",
          "[config]") {
  clean_env guard;
  const std::pair<const char*, const char*> bad[] = {
      {"DMLC_NUM_WORKER", "abc"},
      {"DMLC_NUM_WORKER", "12x"},
      {"DMLC_NUM_WORKER", "-1"},
      {"DMLC_NUM_WORKER", "0"},
      {"DMLC_NUM_WORKER", "99999999999999999999999"},
      {"DMLC_NUM_SERVER", "abc"},
      {"DMLC_NUM_SERVER", "12x"},
      {"DMLC_NUM_SERVER", "-1"},
      {"DMLC_NUM_SERVER", "1.5"},
      {"DMLC_PS_ROOT_PORT", "70000"},
      {"DMLC_PS_ROOT_PORT", "0"},
      {"DMLC_PS_ROOT_PORT", "http"},
      {"DMLC_ROLE", "boss"},
      {"DMLC_ROLE", "Worker"},
      {"BYTEPS_KEY_HASH_FN", "md5"},
      {"DMLC_WORKER_ID", "2"},  // == DMLC_NUM_WORKER
      {"DMLC_WORKER_ID", "5"},  // > DMLC_NUM_WORKER
      {"DMLC_WORKER_ID", "x"},
      {"BYTEPS_SERVER_PORT", "65536"},
      {"BYTEPS_PARTITION_BYTES", "4095"},
      {"BYTEPS_PARTITION_BYTES", "2147483649"},
      {"BYTEPS_PARTITION_BYTES", "4MB"},
      {"BYTEPS_SCHEDULING_CREDIT", "-1"},
      {"BYTEPS_SCHEDULING_PRIORITY", "2"},
      {"BYTEPS_SCHEDULING_PRIORITY", "yes"},
      {"BYTEPS_SERVER_ENGINE_THREAD", "0"},
      {"BYTEPS_SERVER_ENGINE_THREAD", "257"},
      {"BYTEPS_SERVER_CHUNK_BYTES", "67108928"},
      {"BYTEPS_SERVER_CHUNK_BYTES", "-64"},
      {"BYTEPS_SERVER_CHUNK_BYTES", "100"},
      {"BYTEPS_IO_THREADS", "65"},
      {"BYTEPS_IO_POLL_US", "100001"},
      {"BYTEPS_WAIT_POLL_US", "-1"},
      {"BYTEPS_TCP_NOTSENT_LOWAT", "1073741825"},
      {"BYTEPS_TCP_NOTSENT_LOWAT", "-1"},
      {"BYTEPS_IPC_RING_BYTES", "1048575"},
      {"BYTEPS_IPC_RING_BYTES", "1099511627777"},
      {"BYTEPS_LOCAL_SIZE", "0"},
      {"BYTEPS_LOCAL_RANK", "1"},  // == BYTEPS_LOCAL_SIZE (1)
      {"BYTEPS_CONNECT_TIMEOUT_MS", "0"},
      {"BYTEPS_RENDEZVOUS_TIMEOUT_MS", "-5"},
      {"BYTEPS_OP_TIMEOUT_MS", "soon"},
      {"BYTEPS_FAILOVER_TIMEOUT_MS", "-1"},
      {"BYTEPS_FAILOVER_TIMEOUT_MS", "86400001"},
      {"BYTEPS_FAILOVER_TIMEOUT_MS", "30s"},
      {"BYTEPS_SERVER_STANDBY", "2"},
      {"BYTEPS_SERVER_STANDBY", "yes"},
  };
  for (const auto& [name, value] : bad) {
    clear_env();
    set_required();  // DMLC_NUM_WORKER=2
    set(name, value);
    CAPTURE(name, value);
    const auto msg = from_env_error();
    CAPTURE(msg);
    CHECK(contains(msg, name));
    CHECK(contains(msg, std::string("'") + value + "'"));
  }
}

TEST_CASE("Config::from_env reads the failover variables", "[config][failover]") {
  clean_env guard;
  set_required();
  set("DMLC_ROLE", "server");
  set("BYTEPS_FAILOVER_TIMEOUT_MS", "30000");
  set("BYTEPS_SERVER_STANDBY", "1");
  CHECK(bps::Config::from_env().table_journal_dir.empty());
  set("BYTEPS_TABLE_JOURNAL_DIR", "/shared/journals");
  const auto c = bps::Config::from_env();
  CHECK(c.failover_timeout == 30000ms);
  CHECK(c.failover());
  CHECK(c.server_standby);
  CHECK(c.table_journal_dir == "/shared/journals");

  set("BYTEPS_FAILOVER_TIMEOUT_MS", "0");  // off, explicitly
  set("BYTEPS_SERVER_STANDBY", "0");
  const auto off = bps::Config::from_env();
  CHECK_FALSE(off.failover());
  CHECK_FALSE(off.server_standby);

  // A standby needs failover on, and takes no BYTEPS_SERVER_ID of its own.
  set("BYTEPS_SERVER_STANDBY", "1");
  auto msg = from_env_error();
  CAPTURE(msg);
  CHECK(contains(msg, "BYTEPS_SERVER_STANDBY"));
  CHECK(contains(msg, "BYTEPS_FAILOVER_TIMEOUT_MS"));
  set("BYTEPS_FAILOVER_TIMEOUT_MS", "30000");
  set("BYTEPS_SERVER_ID", "0");
  msg = from_env_error();
  CHECK(contains(msg, "BYTEPS_SERVER_ID"));
  CHECK(contains(msg, "standby"));

  // Other roles ignore BYTEPS_SERVER_STANDBY (one environment may serve every role).
  set("DMLC_ROLE", "worker");
  set("BYTEPS_FAILOVER_TIMEOUT_MS", "0");
  CHECK_NOTHROW(bps::Config::from_env());
}

TEST_CASE("Config::from_env range messages say what is expected", "[config]") {
  clean_env guard;
  set_required();
  set("DMLC_WORKER_ID", "2");
  auto msg = from_env_error();
  CHECK(msg == "DMLC_WORKER_ID='2' is not valid: expected a whole number from 0 to 1");
  clear_env();
  set_required();
  set("DMLC_PS_ROOT_PORT", "70000");
  msg = from_env_error();
  CHECK(msg == "DMLC_PS_ROOT_PORT='70000' is not valid: expected a whole number from 1 to 65535");
}

TEST_CASE("Config::validate accepts the defaults and names each bad field", "[config]") {
  REQUIRE_NOTHROW(bps::Config{}.validate());

  struct bad_case {
    const char* field;
    void (*mutate)(bps::Config&);
  };
  const bad_case cases[] = {
      {"num_workers", [](bps::Config& c) { c.num_workers = 0; }},
      {"num_servers", [](bps::Config& c) { c.num_servers = -3; }},
      {"worker_id", [](bps::Config& c) { c.worker_id = -2; }},
      {"worker_id", [](bps::Config& c) { c.num_workers = 2; c.worker_id = 2; }},
      {"partition_bytes", [](bps::Config& c) { c.partition_bytes = 4095; }},
      {"partition_bytes", [](bps::Config& c) { c.partition_bytes = (std::size_t{1} << 31) + 1; }},
      {"scheduling_credit", [](bps::Config& c) { c.scheduling_credit = -1; }},
      {"server_engine_threads", [](bps::Config& c) { c.server_engine_threads = 0; }},
      {"server_engine_threads", [](bps::Config& c) { c.server_engine_threads = 257; }},
      {"server_chunk_bytes", [](bps::Config& c) { c.server_chunk_bytes = 100; }},
      {"server_chunk_bytes", [](bps::Config& c) { c.server_chunk_bytes = (std::size_t{1} << 26) + 64; }},
      {"io_threads", [](bps::Config& c) { c.io_threads = 0; }},
      {"io_threads", [](bps::Config& c) { c.io_threads = 65; }},
      {"io_poll", [](bps::Config& c) { c.io_poll = std::chrono::microseconds(-1); }},
      {"wait_poll", [](bps::Config& c) { c.wait_poll = std::chrono::microseconds(100001); }},
      {"tcp_notsent_lowat", [](bps::Config& c) { c.tcp_notsent_lowat = (1u << 30) + 1; }},
      {"ipc_ring_bytes", [](bps::Config& c) { c.ipc_ring_bytes = (1u << 20) - 1; }},
      {"local_size", [](bps::Config& c) { c.local_size = 0; }},
      {"local_rank", [](bps::Config& c) { c.local_rank = -1; }},
      {"local_rank", [](bps::Config& c) { c.local_size = 2; c.local_rank = 2; }},
      {"worker_id", [](bps::Config& c) { c.local_size = 2; c.worker_id = -1; }},
      {"server_id", [](bps::Config& c) { c.num_servers = 2; c.server_id = 2; }},
      {"num_servers", [](bps::Config& c) { c.mixed_mode = true; c.num_workers = 2; c.num_servers = 2; }},
      {"scheduler_host", [](bps::Config& c) { c.scheduler_host.clear(); }},
      {"connect_timeout", [](bps::Config& c) { c.connect_timeout = std::chrono::milliseconds(0); }},
      {"rendezvous_timeout", [](bps::Config& c) { c.rendezvous_timeout = std::chrono::milliseconds(-1); }},
      {"op_timeout", [](bps::Config& c) { c.op_timeout = std::chrono::milliseconds(0); }},
      {"failover_timeout", [](bps::Config& c) { c.failover_timeout = std::chrono::milliseconds(-1); }},
      {"server_standby", [](bps::Config& c) { c.node_role = bps::role::server; c.server_standby = true; }},
  };
  for (const auto& bc : cases) {
    bps::Config c;
    bc.mutate(c);
    CAPTURE(bc.field);
    const auto msg = validate_error(c);
    CAPTURE(msg);
    CHECK(contains(msg, bc.field));
  }

  // the message carries the bad value and the variable
  bps::Config c;
  c.num_workers = 4;
  c.worker_id = 9;
  CHECK(validate_error(c) ==
        "Config: worker_id (DMLC_WORKER_ID) = 9 is not valid: expected -1 (assigned) or 0 .. num_workers-1");
  bps::Config p;
  p.partition_bytes = 100;
  CHECK(validate_error(p) ==
        "Config: partition_bytes (BYTEPS_PARTITION_BYTES) = 100 is not valid: expected 0 (auto) or "
        "4096 .. 2^31");

  // valid edge values pass
  bps::Config ok;
  ok.num_workers = 3;
  ok.worker_id = 2;
  ok.partition_bytes = 4096;
  ok.scheduling_credit = 0;
  ok.local_size = 8;
  ok.local_rank = 7;
  CHECK_NOTHROW(ok.validate());
}

TEST_CASE("usage_error is a bps::error", "[config]") {
  clean_env guard;
  try {
    (void)bps::Config::from_env();
    FAIL("from_env() did not throw");
  } catch (const bps::error& e) {
    CHECK(contains(e.what(), "DMLC_ROLE"));
  }
}
