// transport::ipc: a worker and a server of one machine move push payloads through shared
// memory; sums stay exact, plain TCP nodes still talk to ipc nodes, and BYTEPS_ENABLE_IPC=0
// turns the shortcut off.
#include "cluster.hpp"
#include "run_cluster.hpp"
#include "values.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace bps;

namespace {

using ipc_tcp = transport::ipc<transport::tcp>;
using ipc_comm = Communicator<ipc_tcp, local::none, partition::by_bytes, schedule::priority>;
using ipc_host_comm = Communicator<ipc_tcp, local::host, partition::by_bytes, schedule::priority>;

// Every dtype, large enough to take the ring (>= 16 KiB per partition), exact sums.
template <class Comm>
void exact_sums(Comm& comm, int rounds) {
  for (int round = 0; round < rounds; ++round)
    for (dtype t : all_dtypes) {
      const std::size_t n = 100003;
      auto b = test::fill(t, n, comm.rank(), round);
      comm.push_pull(fmt::format("ipc.{}", dtype_name(t)), b.data(), n, t).wait();
      auto wrong = test::first_wrong(t, b, n, comm.size(), round);
      BPS_EXPECT(wrong == n, "{} round {}: element {} is not the sum", dtype_name(t), round,
                 wrong);
    }
}

}  // namespace

TEST_CASE("ipc: 2 workers x 2 servers on one machine - exact sums through shared memory",
          "[cluster][ipc]") {
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 65536;
  test::run_cluster<ipc_tcp, ipc_comm>(cfg, {1, 1}, [&](ipc_comm& comm) { exact_sums(comm, 5); });
}

TEST_CASE("ipc: local ranks and colocated servers together - exact sums", "[cluster][ipc]") {
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 65536;
  test::run_cluster<ipc_tcp, ipc_host_comm>(cfg, {2, 2}, [&](ipc_host_comm& comm) { exact_sums(comm, 3); });
}

TEST_CASE("ipc workers and plain tcp servers still talk (no handshake, no shortcut)",
          "[cluster][ipc]") {
  auto cfg = test::base_config(2, 1);
  test::run_cluster<transport::tcp, ipc_comm>(cfg, {1, 1}, [&](ipc_comm& comm) { exact_sums(comm, 2); });
}

TEST_CASE("plain tcp workers and ipc servers still talk", "[cluster][ipc]") {
  auto cfg = test::base_config(2, 1);
  test::run_cluster<ipc_tcp, test::comm_t>(cfg, {1, 1}, [&](test::comm_t& comm) { exact_sums(comm, 2); });
}

TEST_CASE("ipc transport: payloads take shared memory both ways only after the handshake, and "
          "not with BYTEPS_ENABLE_IPC=0",
          "[ipc]") {
  for (bool enabled : {true, false}) {
    CAPTURE(enabled);
    Config c = test::base_config(1, 1);
    c.enable_ipc = enabled;
    ipc_tcp server_net(c), client_net(c);

    struct collect final : transport::receiver {
      std::mutex mu;
      std::condition_variable cv;
      std::vector<std::vector<std::byte>> got;
      std::vector<std::byte> buffer;
      std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
        buffer.resize(h.payload_bytes);
        return buffer;
      }
      void on_message(const wire::header&, std::span<std::byte> p) override {
        std::lock_guard lock(mu);
        got.emplace_back(p.begin(), p.end());
        cv.notify_all();
      }
      void on_close(const std::string&) override {}
      // Waits (10 s at most) for as many payloads as were sent; true when they are those.
      bool received(const std::vector<std::vector<std::byte>>& sent) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, std::chrono::seconds(10),
                           [&] { return got.size() >= sent.size(); }) &&
               got == sent;
      }
    };
    auto server_side = std::make_shared<collect>();
    std::shared_ptr<ipc_tcp::link> accepted;
    const auto port = server_net.listen("127.0.0.1", 0, [&](std::shared_ptr<ipc_tcp::link> l) {
      accepted = l;
      l->start(server_side);
    });
    auto client = client_net.connect("127.0.0.1", port, std::chrono::seconds(5));
    std::shared_ptr<transport::receiver> client_receiver = std::make_shared<collect>();
    client->start(client_receiver);
    // Give the handshake its round trip, then send payloads of every size class.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<std::vector<std::byte>> sent;
    for (std::size_t n : {std::size_t{100}, std::size_t{16384}, std::size_t{1} << 20}) {
      sent.emplace_back(n);
      for (std::size_t i = 0; i < n; ++i) sent.back()[i] = static_cast<std::byte>(i * 7 + n);
    }
    for (auto& p : sent) {
      wire::header h;
      h.type = wire::msg::push;
      client->send(h, p, {});
    }
    REQUIRE(server_side->received(sent));
    // The two payloads of at least 16 KiB went through the ring when enabled.
    CHECK(client_net.payloads_through_shm() == (enabled ? 2u : 0u));
    // The way back has a ring of its own, offered by the server once it mapped the client's.
    const auto ready_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (enabled && !accepted->through_shm() && std::chrono::steady_clock::now() < ready_by)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(accepted->through_shm() == enabled);
    CHECK(client->through_shm() == enabled);
    auto client_side = std::static_pointer_cast<collect>(client_receiver);
    for (auto& p : sent) {
      wire::header h;
      h.type = wire::msg::pull_response;
      accepted->send(h, p, {});
    }
    REQUIRE(client_side->received(sent));
    const auto counted = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (enabled && server_net.payloads_through_shm() < 1 &&
           std::chrono::steady_clock::now() < counted)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // Only the 1 MiB one: answers take the ring from min_ipc_answer_bytes (256 KiB) on.
    static_assert(ipc_tcp::min_ipc_answer_bytes > 16384 &&
                  ipc_tcp::min_ipc_answer_bytes <= (std::size_t{1} << 20));
    CHECK(server_net.payloads_through_shm() == (enabled ? 1u : 0u));
    client_net.stop();
    server_net.stop();
  }
}

TEST_CASE("ipc transport removes rings left by a process that died before its peer mapped them",
          "[ipc]") {
  // A pid that is certainly gone: a child that exited and was reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);
  const auto orphan = fmt::format("/bps-ipc-{}-0123456789abcdef", child);
  const auto mine = fmt::format("/bps-ipc-{}-0123456789abcdef", ::getpid());
  for (const auto& name : {orphan, mine}) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  Config c = test::base_config(1, 1);
  { ipc_tcp net(c); }
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + orphan));
  CHECK(std::filesystem::exists("/dev/shm" + mine));  // its creator (this process) lives
  ::shm_unlink(mine.c_str());
}
