// The RDMA transport's configuration as ps-lite users know it: DMLC_ENABLE_RDMA, DMLC_INTERFACE,
// BYTEPS_RDMA_* read by Config::from_env() (the one reader of the environment), checked with
// messages naming the variable, and copied into the transport's options by
// rdma_options::from(cfg), which the transport then uses (its memlock check, its device).
#include <byteps/bodies.hpp>
#include <byteps/core/net_interface.hpp>
#include <catch2/catch.hpp>

#include "../cluster/cluster.hpp"
#include "../cluster/run_cluster.hpp"
#include "../unit/config_env.hpp"
#include "rdma_pair.hpp"

using namespace bps;
using namespace config_test;
using Catch::Contains;

namespace {

// The message of the communicator_error that building the transport throws.
std::string start_error(const Config& cfg, const test::emu_rdma::options& opts) {
  try {
    test::emu_rdma t(cfg, opts);
  } catch (const communicator_error& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

TEST_CASE("rdma config: unset, the transport is tcp and the rdma options are the defaults",
          "[rdma][config]") {
  clean_env guard;
  set_required();
  const auto c = Config::from_env();
  CHECK_FALSE(c.enable_rdma);
  CHECK(c.network_interface.empty());
  const auto o = test::emu_rdma::options::from(c);
  const test::emu_rdma::options defaults;
  CHECK(o.device == "");
  CHECK(o.port == 1);
  CHECK(o.gid_index == -1);
  CHECK(o.rx_depth == 64);
  CHECK(o.start_depth == 16);
  CHECK(o.staging_bytes == (256u << 10));
  CHECK_FALSE(o.busy_poll);
  CHECK(o.link_bytes() == defaults.link_bytes());
}

TEST_CASE("rdma config: DMLC_ENABLE_RDMA takes ibverbs or 1 for rdma, 0 for tcp, nothing else",
          "[rdma][config]") {
  clean_env guard;
  set_required();
  set("DMLC_ENABLE_RDMA", "ibverbs");
  CHECK(Config::from_env().enable_rdma);
  set("DMLC_ENABLE_RDMA", "1");
  CHECK(Config::from_env().enable_rdma);
  set("DMLC_ENABLE_RDMA", "0");
  CHECK_FALSE(Config::from_env().enable_rdma);
  set("DMLC_ENABLE_RDMA", "");  // set but empty counts as unset
  CHECK_FALSE(Config::from_env().enable_rdma);
  for (const char* bad : {"zmq", "IBVERBS", "2", "yes"}) {
    set("DMLC_ENABLE_RDMA", bad);
    CHECK(from_env_error() ==
          fmt::format("DMLC_ENABLE_RDMA='{}' is not valid: expected ibverbs or 1 (the RDMA "
                      "transport), or 0 or unset (TCP)",
                      bad));
  }
}

TEST_CASE("rdma config: every BYTEPS_RDMA_* variable reaches the transport's options",
          "[rdma][config]") {
  clean_env guard;
  set_required();
  set("BYTEPS_RDMA_DEVICE", "mlx5_1");
  set("BYTEPS_RDMA_PORT", "2");
  set("BYTEPS_RDMA_GID_INDEX", "3");
  set("BYTEPS_RDMA_RX_DEPTH", "128");
  set("BYTEPS_RDMA_START_DEPTH", "32");
  set("BYTEPS_RDMA_STAGING_BYTES", "1048576");
  set("BYTEPS_RDMA_BUSY_POLL", "1");
  const auto o = test::emu_rdma::options::from(Config::from_env());
  CHECK(o.device == "mlx5_1");
  CHECK(o.port == 2);
  CHECK(o.gid_index == 3);
  CHECK(o.rx_depth == 128);
  CHECK(o.start_depth == 32);
  CHECK(o.staging_bytes == 1048576u);
  CHECK(o.busy_poll);
  CHECK(o.link_bytes() == (128u + 32u) * 4096u + 2u * 1048576u);
  CHECK_NOTHROW(o.validate());
}

TEST_CASE("rdma config: a bad BYTEPS_RDMA_* value is refused, naming the variable and value",
          "[rdma][config]") {
  struct bad_value {
    const char* variable;
    const char* value;
    const char* expected;
  };
  const bad_value cases[] = {
      {"BYTEPS_RDMA_RX_DEPTH", "3", "a whole number from 4 to 16384"},
      {"BYTEPS_RDMA_RX_DEPTH", "deep", "a whole number from 4 to 16384"},
      {"BYTEPS_RDMA_START_DEPTH", "1", "a whole number from 2 to 16384"},
      {"BYTEPS_RDMA_START_DEPTH", "16385", "a whole number from 2 to 16384"},
      {"BYTEPS_RDMA_PORT", "0", "a whole number from 1 to 255"},
      {"BYTEPS_RDMA_GID_INDEX", "-1", "a whole number from 0 to 255"},
      {"BYTEPS_RDMA_GID_INDEX", "256", "a whole number from 0 to 255"},
      {"BYTEPS_RDMA_STAGING_BYTES", "4095", "a whole number from 4096 to 1073741824"},
      {"BYTEPS_RDMA_BUSY_POLL", "2", "a whole number from 0 to 1"},
  };
  for (const auto& b : cases) {
    clean_env guard;
    set_required();
    set(b.variable, b.value);
    CAPTURE(b.variable, b.value);
    CHECK(from_env_error() ==
          fmt::format("{}='{}' is not valid: expected {}", b.variable, b.value, b.expected));
  }
}

TEST_CASE("rdma config: validate() checks a Config built in code, naming field and variable",
          "[rdma][config]") {
  auto with = [](auto edit) {
    Config c;
    edit(c);
    return validate_error(c);
  };
  CHECK(with([](Config& c) { c.rdma.rx_depth = 3; }) ==
        "Config: rdma.rx_depth (BYTEPS_RDMA_RX_DEPTH) = 3 is not valid: expected 4 .. 16384");
  CHECK(with([](Config& c) { c.rdma.start_depth = 1; }) ==
        "Config: rdma.start_depth (BYTEPS_RDMA_START_DEPTH) = 1 is not valid: expected 2 .. "
        "16384");
  CHECK(with([](Config& c) { c.rdma.port = 0; }) ==
        "Config: rdma.port (BYTEPS_RDMA_PORT) = 0 is not valid: expected 1 .. 255");
  CHECK(with([](Config& c) { c.rdma.gid_index = -2; }) ==
        "Config: rdma.gid_index (BYTEPS_RDMA_GID_INDEX) = -2 is not valid: expected -1 (RoCE v2 "
        "preferred) .. 255");
  CHECK(with([](Config& c) { c.rdma.staging_bytes = 100; }) ==
        "Config: rdma.staging_bytes (BYTEPS_RDMA_STAGING_BYTES) = 100 is not valid: expected "
        "4096 .. 2^30");
}

TEST_CASE("rdma config: DMLC_INTERFACE names an interface with an IPv4 address, checked at start",
          "[rdma][config]") {
  clean_env guard;
  set_required();
  set("DMLC_INTERFACE", "lo");
  CHECK(Config::from_env().network_interface == "lo");
  CHECK(interface_address("lo") == "127.0.0.1");
  set("DMLC_INTERFACE", "nosuch0");
  const auto message = from_env_error();
  CHECK_THAT(message, Contains("DMLC_INTERFACE='nosuch0' is not valid: expected a network "
                               "interface with an IPv4 address (here: "));
  CHECK_THAT(message, Contains("lo"));
}

TEST_CASE("rdma config: the transport built from the environment uses its values at start",
          "[rdma][config]") {
  clean_env guard;
  set_required();
  set("BYTEPS_RDMA_RX_DEPTH", "128");
  set("BYTEPS_RDMA_START_DEPTH", "32");
  set("BYTEPS_RDMA_STAGING_BYTES", "1048576");
  auto cfg = Config::from_env();
  cfg.log = log_level::off;
  auto net = std::make_shared<test::emu::fabric>();
  auto opts = test::emu_rdma::options::from(cfg);
  opts.verbs.net = net;
  // A memlock limit below one link's slab: the message has the slab the variables asked for.
  net->set_memlock_limit(2u << 20);
  const auto memlock = start_error(cfg, opts);
  CHECK_THAT(memlock, Contains("RLIMIT_MEMLOCK is 2097152 bytes, but one RDMA link registers "
                               "2752512 bytes"));
  net->set_memlock_limit(std::nullopt);
  // BYTEPS_RDMA_DEVICE picks the device by name: one that does not exist is named.
  set("BYTEPS_RDMA_DEVICE", "mlx5_9");
  opts = test::emu_rdma::options::from(Config::from_env());
  opts.verbs.net = net;
  CHECK(start_error(cfg, opts) == "rdma: no device named 'mlx5_9' (devices: emu0)");
  // BYTEPS_RDMA_GID_INDEX past the port's table.
  ::unsetenv("BYTEPS_RDMA_DEVICE");
  set("BYTEPS_RDMA_GID_INDEX", "5");
  opts = test::emu_rdma::options::from(Config::from_env());
  opts.verbs.net = net;
  CHECK(start_error(cfg, opts) ==
        "rdma: BYTEPS_RDMA_GID_INDEX = 5 is past the GID table of emu0 port 1 (2 entries)");
  CHECK(net->violations().empty());
  CHECK(net->live_objects() == 0);
}

TEST_CASE("rdma config: a server listens on DMLC_NODE_HOST, else DMLC_INTERFACE's address",
          "[rdma][config]") {
  Config c;
  CHECK(c.listen_host("10.1.2.3") == "10.1.2.3");  // neither: the scheduler link's address
  c.network_interface = "lo";
  CHECK(c.listen_host("10.1.2.3") == "127.0.0.1");
  c.node_host = "192.0.2.77";  // DMLC_NODE_HOST wins
  CHECK(c.listen_host("10.1.2.3") == "192.0.2.77");
  c.node_host.clear();
  c.network_interface = "nosuch0";
  CHECK_THROWS_WITH(c.listen_host("10.1.2.3"),
                    Contains("DMLC_INTERFACE='nosuch0' is not valid: expected a network "
                             "interface with an IPv4 address"));
}

TEST_CASE("rdma config: servers with DMLC_INTERFACE=lo serve a 1x2 cluster over RDMA, exact sums",
          "[rdma][config][cluster]") {
  using comm_t = Communicator<test::emu_rdma, local::none, partition::by_bytes, schedule::priority>;
  Config cfg = test::base_config(1, 2);
  cfg.network_interface = "lo";
  cfg.partition_bytes = 8192;
  std::atomic<int> checked{0};
  test::run_cluster<test::emu_rdma, comm_t, test::emu_rdma>(cfg, {1}, [&](comm_t& comm) {
    std::vector<double> v(5000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * 0.5;
    comm.push_pull("x", std::span(v)).wait();
    for (std::size_t i = 0; i < v.size(); ++i)
      BPS_EXPECT(v[i] == static_cast<double>(i) * 0.5, "x[{}] = {}", i, v[i]);
    ++checked;
  });
  CHECK(checked == 1);
}
