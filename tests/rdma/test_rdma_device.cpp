// The real-device suite: transport::rdma (rdma-core) on an RDMA NIC of this machine. It runs only
// where ibv_get_device_list finds a device whose network interface has an IPv4 address, and
// otherwise exits 77 (CTest: skipped) saying why. Traffic stays on this machine: both ends use
// the NIC's own address. Never run in this project's CI, which has no RDMA NIC.
#define CATCH_CONFIG_RUNNER
#include <byteps/bodies.hpp>
#include <byteps/core/net_interface.hpp>
#include <byteps/transport/rdma/rdma.hpp>
#include <catch2/catch.hpp>
#include <fmt/format.h>  // fmt::join
#include <cstdio>
#include <filesystem>

#include "../cluster/cluster.hpp"
#include "../cluster/exact_rounds.hpp"
#include "../cluster/run_cluster.hpp"
#include "rdma_pair.hpp"

using namespace bps;
using namespace std::chrono_literals;

namespace {

std::string g_host;  // the address of the first RDMA device's network interface

// The IPv4 address of a network interface of some RDMA device (sysfs:
// /sys/class/infiniband/<device>/device/net/<interface>), or "" with `why` saying what is missing.
std::string rdma_interface_address(std::string& why) {
  namespace fs = std::filesystem;
  const auto devices = transport::rdma_core().device_names();
  if (devices.empty()) {
    why = "no RDMA device (ibv_get_device_list found none)";
    return {};
  }
  std::error_code ec;
  for (const auto& d : devices)
    for (const auto& e : fs::directory_iterator("/sys/class/infiniband/" + d + "/device/net", ec)) {
      try {
        return interface_address(e.path().filename().string(), "the RDMA device's interface");
      } catch (const usage_error&) {
        // no IPv4 address on this one: try the next
      }
    }
  why = fmt::format(
      "RDMA device(s) {} found, but no network interface of theirs has an IPv4 "
      "address for rdma_cm",
      fmt::join(devices, ", "));
  return {};
}

Config device_config() {
  Config c = test::quiet_config();
  c.scheduler_host = g_host;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  g_host = rdma_interface_address(why);
  if (g_host.empty()) {
    std::printf(
        "SKIPPED: the real-device RDMA suite needs an RDMA NIC: %s. The transport's "
        "logic is tested on the emulation (byteps_rdma_tests).\n",
        why.c_str());
    return 77;
  }
  std::printf("rdma device suite on %s\n", g_host.c_str());
  return Catch::Session().run(argc, argv);
}

TEST_CASE("rdma device: the port is read at start (MTU, GID index, RoCE v2 preferred)",
          "[rdma][device]") {
  transport::rdma_core v;
  auto* dev = v.open_device("", 1, -1);
  const auto port = v.port(dev);
  v.close_device(dev);
  CHECK_FALSE(port.device.empty());
  CHECK(port.port == 1);
  const std::uint32_t mtus[] = {256, 512, 1024, 2048, 4096};
  CHECK(std::find(std::begin(mtus), std::end(mtus), port.mtu_bytes) != std::end(mtus));
  CHECK(port.gid_index >= 0);
}

TEST_CASE("rdma device: frames of every size arrive exact and in order over the NIC",
          "[rdma][device]") {
  const std::size_t sizes[] = {0, 1, 4000, 4096, 100000, (1u << 20) + 12, 16u << 20};
  transport::rdma server(device_config()), client(device_config());
  std::shared_ptr<transport::rdma::link> accepted;
  auto server_rx = std::make_shared<test::recorder>();
  std::mutex mu;
  std::condition_variable cv;
  const auto port = server.listen(g_host, 0, [&](std::shared_ptr<transport::rdma::link> l) {
    l->start(server_rx);
    std::lock_guard lock(mu);
    accepted = std::move(l);
    cv.notify_all();
  });
  auto link = client.connect(g_host, port, 10s);
  link->start(std::make_shared<test::recorder>());
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 10s, [&] { return accepted != nullptr; }));
  }
  // Half the payloads in registered memory (one direct WRITE), half through staging.
  std::vector<std::byte> arena(32u << 20);
  client.register_memory(arena);
  std::vector<std::vector<std::byte>> plain;
  test::sent_counter sent;
  std::size_t used = 0;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    const auto want = test::pattern(i, sizes[i]);
    std::span<const std::byte> payload;
    if (i % 2 == 0) {
      std::copy(want.begin(), want.end(), arena.begin() + static_cast<std::ptrdiff_t>(used));
      payload = std::span(arena).subspan(used, sizes[i]);
      used += sizes[i];
    } else {
      plain.push_back(want);
      payload = plain.back();
    }
    wire::header h;
    h.type = wire::msg::push;
    h.key = i;
    link->send(h, payload, sent.make(i));
  }
  REQUIRE(server_rx->wait_messages(std::size(sizes), 30s));
  REQUIRE(sent.wait_all(30s));
  const auto frames = server_rx->frames();
  REQUIRE(frames.size() == std::size(sizes));
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    CAPTURE(i, sizes[i]);
    CHECK(frames[i].header.key == i);
    CHECK(frames[i].bytes == test::pattern(i, sizes[i]));
  }
  client.stop();
  server.stop();
}

TEST_CASE("rdma device: 2 workers x 2 servers over the NIC, every dtype, exact sums",
          "[rdma][device][cluster]") {
  using comm_t =
      Communicator<transport::rdma, local::none, partition::by_bytes, schedule::priority>;
  Config cfg = test::base_config(2, 2);
  cfg.scheduler_host = g_host;
  cfg.node_host = g_host;
  cfg.partition_bytes = 65536;
  const std::size_t sizes[] = {1, 3, 1023, 4097, 20011, 1u << 20};
  std::atomic<int> ranks_checked{0};
  test::run_cluster<transport::rdma, comm_t, transport::rdma>(cfg, {1, 1}, [&](comm_t& comm) {
    for (int round = 0; round < 3; ++round)
      test::exact_round_every_dtype(comm, sizes, round, 2, "rdma device 2x2: ");
    ++ranks_checked;
  });
  CHECK(ranks_checked == 2);
}
