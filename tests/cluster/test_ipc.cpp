// transport::ipc: a worker and a server of one machine move push payloads through shared
// memory, and the server sums them where they lie in the worker's ring; sums stay exact, plain
// TCP nodes still talk to ipc nodes, and BYTEPS_ENABLE_IPC=0 turns the shortcut off.
#include "cluster.hpp"
#include "counted_ipc.hpp"
#include "exact_rounds.hpp"
#include "ipc_pair.hpp"
#include "failover_cluster.hpp"
#include "poll_until.hpp"
#include "run_cluster.hpp"
#include "short_schedule.hpp"
#include "values.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace bps;

namespace {

using test::counted_comm;
using test::counted_ipc;
using test::ipc_tcp;
using test::run_counted;
using test::tally;
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

    auto server_side = std::make_shared<test::holder>();
    server_side->wants_in_place = false;
    std::shared_ptr<ipc_tcp::link> accepted;
    const auto port = server_net.listen("127.0.0.1", 0, [&](std::shared_ptr<ipc_tcp::link> l) {
      accepted = l;
      l->start(server_side);
    });
    auto client = client_net.connect("127.0.0.1", port, std::chrono::seconds(5));
    auto client_side = std::make_shared<test::holder>();
    client_side->wants_in_place = false;
    client->start(client_side);
    // Enabled, wait for the handshake (its round trip, the ring mapped); disabled, give a wrong
    // handshake the time to happen. Then send payloads of every size class.
    if (enabled) {
      REQUIRE(test::poll_until([&] { return client->through_shm(); }, std::chrono::seconds(10)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
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
    if (enabled)
      test::poll_until([&] { return accepted->through_shm(); }, std::chrono::seconds(10));
    CHECK(accepted->through_shm() == enabled);
    CHECK(client->through_shm() == enabled);
    for (auto& p : sent) {
      wire::header h;
      h.type = wire::msg::pull_response;
      accepted->send(h, p, {});
    }
    REQUIRE(client_side->received(sent));
    if (enabled)
      test::poll_until([&] { return server_net.payloads_through_shm() >= 1; },
                       std::chrono::seconds(5));
    // Only the 1 MiB one: answers take the ring from min_ipc_answer_bytes (128 KiB) on.
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

TEST_CASE("ipc: servers sum pushes where they lie in the workers' rings - every dtype, 16 KiB to "
          "64 MiB, exact sums",
          "[cluster][ipc]") {
  auto cfg = test::base_config(2, 2);
  // One push per ring payload, so the counts below match one to one: a push_batch in a ring is
  // copied out and split (test_fusion.cpp covers fusion over ipc).
  cfg.fusion_bytes = 0;
  auto workers = std::make_shared<tally>(), servers = std::make_shared<tally>();
  const int rounds = test::rounds(3, 1);  // 3 rounds took 98 s under TSan
  const std::vector<std::size_t> sizes = {std::size_t{16} << 10, std::size_t{256} << 10,
                                          std::size_t{4} << 20};
  // 64 MiB: each server's half is twice its ring, so pushes wait for space the sums free. The
  // short schedule sends it in one dtype only: the ring sees bytes, not types.
  constexpr std::size_t largest = std::size_t{64} << 20;
  constexpr dtype one_type[] = {dtype::float32};
  run_counted(
      cfg,
      [&](counted_comm& comm) {
        test::exact_sums_at(comm, "in_place", rounds, sizes);
        if (test::short_schedule)
          test::exact_sums_at(comm, "in_place", rounds, {largest}, one_type);
        else
          test::exact_sums_at(comm, "in_place", rounds, {largest});
      },
      workers, servers);
  // Every push that took a ring, or went by reference from its partition's slot (128 KiB and
  // up, from a partition's third round: test_ipc_partition_slots.cpp), was summed where it lay,
  // and nothing else was.
  CHECK(workers->through_shm > 0);
  CHECK(servers->in_place == workers->through_shm + workers->by_reference);
  CHECK(workers->in_place == 0);  // answers are copied into the worker's tensors
}

TEST_CASE(
    "ipc: answers of 128 KiB and up go as their place in the server's shared buffers - "
    "every dtype, 6 rounds, exact sums",
    "[cluster][ipc]") {
  // Sums of several keys and sizes, round after round, recycle the server's buffers among
  // keys: a buffer reused before a worker read the answer in it would give a wrong sum. A
  // buffer's first answer is copied while its memory is offered, so each key needs a round
  // beyond its two sum buffers' first use (4 under the short schedule).
  auto cfg = test::base_config(2, 2);
  auto workers = std::make_shared<tally>(), servers = std::make_shared<tally>();
  const int rounds = test::rounds(6, 4);
  const std::vector<std::size_t> sizes = {std::size_t{16} << 10, std::size_t{256} << 10,
                                          std::size_t{1} << 20, std::size_t{4} << 20};
  run_counted(
      cfg, [&](counted_comm& comm) { test::exact_sums_at(comm, "by_ref", rounds, sizes); },
      workers, servers);
  CHECK(servers->by_reference > 0);  // the answers
  // The workers' pushes of 128 KiB and up go by reference too, from their partitions' slots
  // (test_ipc_partition_slots.cpp); each push is summed where it lies.
  CHECK(servers->in_place == workers->through_shm + workers->by_reference);
  CHECK(workers->in_place == 0);  // each worker copies its answer into its tensor
}

TEST_CASE(
    "ipc: a 1 MiB tensor on 2 servers, cut in partitions of 128 KiB, goes by reference "
    "both ways - exact sums",
    "[cluster][ipc]") {
  // Partitions of 128 KiB cut 1 MiB for 2 servers into 8: at min_ipc_answer_bytes, so pushes
  // go from their slots and answers as the sums' place, not by ring and TCP. (The automatic
  // size makes one partition of 1 MiB on one host, test_one_host_split.cpp.)
  static_assert(ipc_tcp::min_ipc_answer_bytes <= (std::size_t{128} << 10));
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = std::size_t{128} << 10;
  cfg.fusion_bytes = 0;
  auto workers = std::make_shared<tally>(), servers = std::make_shared<tally>();
  constexpr dtype one_type[] = {dtype::float32};
  run_counted(
      cfg,
      [&](counted_comm& comm) {
        test::exact_sums_at(comm, "mib", test::rounds(6, 4), {std::size_t{1} << 20}, one_type);
      },
      workers, servers);
  CHECK(servers->by_reference > 0);  // the answers
  CHECK(workers->by_reference > 0);  // the pushes, from a partition's third round
  CHECK(servers->in_place == workers->through_shm + workers->by_reference);
}

TEST_CASE("ipc: with BYTEPS_ENABLE_IPC=0 no answer goes by reference - exact sums",
          "[cluster][ipc]") {
  auto cfg = test::base_config(2, 1);
  cfg.enable_ipc = false;
  auto workers = std::make_shared<tally>(), servers = std::make_shared<tally>();
  constexpr dtype one_type[] = {dtype::float32};
  run_counted(
      cfg,
      [&](counted_comm& comm) {
        test::exact_sums_at(comm, "private", 2, {std::size_t{1} << 20}, one_type);
      },
      workers, servers);
  CHECK(servers->by_reference == 0);
  CHECK(servers->through_shm == 0);
}

TEST_CASE("ipc: pushes that do not fit a ring held by pushes waiting for their round go by tcp, "
          "and sums stay exact",
          "[cluster][ipc]") {
  auto cfg = test::base_config(2, 2);
  cfg.scheduling_credit = 0;  // every partition in flight at once
  auto workers = std::make_shared<tally>(), servers = std::make_shared<tally>();
  const int rounds = test::rounds(2, 1);  // each round fills the rings anew
  constexpr int tensors = 12;
  constexpr std::size_t n = (std::size_t{16} << 20) / sizeof(float);
  // Worker 1 pushes a round only once worker 0 handed all of that round's pushes to its
  // transport: until then no round can sum, so every push of worker 0 holds its ring space and
  // its 96 MiB per server cannot all fit. (A sleep was not enough: under TSan worker 0 could
  // take longer than it to fill and push, and rounds summed as it went.)
  std::atomic<int> rounds_handed_over{0};  // by worker 0
  run_counted(
      cfg,
      [&](counted_comm& comm) {
        const auto total_pushed = [&comm] {
          std::uint64_t sum = 0;
          for (auto bytes : comm.stats().bytes_per_server) sum += bytes;
          return sum;
        };
        for (int round = 0; round < rounds; ++round) {
          std::vector<std::vector<std::byte>> b;
          b.reserve(tensors);  // each push reads its tensor until it is answered
          for (int i = 0; i < tensors; ++i)
            b.push_back(test::fill(dtype::float32, n, comm.rank() + i, round));
          if (comm.rank() == 1)
            BPS_EXPECT(test::poll_until([&] { return rounds_handed_over > round; },
                                        std::chrono::seconds(120)),
                       "round {}: worker 0 did not hand its pushes over within 120 s", round);
          const std::uint64_t before = total_pushed();
          std::vector<handle> h;
          for (int i = 0; i < tensors; ++i)
            h.push_back(comm.push_pull(fmt::format("full.{}", i),
                                       b[static_cast<std::size_t>(i)].data(), n, dtype::float32));
          if (comm.rank() == 0) {
            const std::uint64_t all = tensors * n * sizeof(float);
            BPS_EXPECT(test::poll_until([&] { return total_pushed() - before >= all; },
                                        std::chrono::seconds(120), std::chrono::milliseconds(5)),
                       "round {}: {} of {} bytes handed to the transport after 120 s", round,
                       total_pushed() - before, all);
            rounds_handed_over = round + 1;
          }
          for (int i = 0; i < tensors; ++i) {
            h[static_cast<std::size_t>(i)].wait();
            // Worker w filled tensor i as worker w + i: the sum is that of workers i and i + 1.
            for (std::size_t e = 0; e < n; ++e) {
              float got;
              std::memcpy(&got, b[static_cast<std::size_t>(i)].data() + e * sizeof(float),
                          sizeof(float));
              const auto expect = test::value_at(dtype::float32, e, i, round) +
                                  test::value_at(dtype::float32, e, i + 1, round);
              BPS_EXPECT(got == static_cast<float>(expect),
                         "tensor {} round {}: element {} is {}, not {}", i, round, e, got, expect);
            }
          }
        }
      },
      workers, servers);
  const std::uint64_t pushes =
      2 * tensors * rounds * partition::by_bytes(cfg).split(n * sizeof(float), sizeof(float)).size();
  CHECK(workers->through_shm > 0);
  CHECK(workers->through_shm < pushes);  // the rings filled: the rest went by tcp
  // In round 2 some partitions' slots were offered already (test_ipc_partition_slots.cpp).
  CHECK(servers->in_place == workers->through_shm + workers->by_reference);
}

TEST_CASE("ipc with failover: a server killed mid-run while it sums pushes in place is replaced, "
          "and every sum stays exact",
          "[cluster][ipc][failover]") {
  using namespace std::chrono_literals;
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 16384;  // partitions of 16 KiB take the ring, a tensor's last one not
  cfg.failover_timeout = 10s;
  cfg.heartbeat_interval = 100ms;
  cfg.heartbeat_timeout = 2000ms;
  constexpr int rounds = 16, kill_at = 5;
  constexpr std::pair<dtype, std::size_t> what[] = {
      {dtype::float32, 20000}, {dtype::float16, 30000}, {dtype::int64, 9000}};
  test::failover_cluster<ipc_tcp> c(cfg, 1);
  using comm_type = test::failover_cluster<ipc_tcp>::comm_type;
  c.run_workers([&](comm_type& comm, int rank) {
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::vector<std::byte>> data;
      std::vector<handle> handles;
      for (auto [t, n] : what) data.push_back(test::fill(t, n, rank, r));
      test::issue_then_wait_all(handles, [&] {  // every buffer outlives its handle
        for (std::size_t i = 0; i < std::size(what); ++i)
          handles.push_back(comm.push_pull(fmt::format("fo_ipc.{}", i), data[i].data(),
                                           what[i].second, what[i].first));
        if (rank == 0 && r == kill_at) c.kill_server(1);  // with this round's pushes in flight
      });
      for (std::size_t i = 0; i < std::size(what); ++i) {
        const auto [t, n] = what[i];
        const auto wrong = test::first_wrong(t, data[i], n, 2, r);
        BPS_EXPECT(wrong == n, "worker {} round {}: tensor {} element {} is not the exact sum",
                   rank, r, i, wrong);
      }
    }
  });
  CHECK(c.replacements() == 1);
}
