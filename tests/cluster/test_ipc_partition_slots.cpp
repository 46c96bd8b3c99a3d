// transport::ipc's partition slots: a worker's push of 128 KiB or more, sent with
// send_partition, is copied into its partition's own slot of shared memory and goes by
// reference, so a worker ahead of the others never fills its ring and sends by TCP.
#include "cluster.hpp"
#include "counted_ipc.hpp"
#include "ipc_pair.hpp"
#include "poll_until.hpp"

#include <catch2/catch.hpp>

#include "byteps/transport/ipc/ipc_partition_slots.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

using namespace bps;

namespace {

std::vector<std::byte> pattern_of(std::size_t bytes, int seed) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>(i * 13 + seed * 101);
  return v;
}

// Sends `payload` as partition `part`'s push on the pair's client link and waits until it came.
bool send_partition_and_wait(test::ring_pair& pair, std::uint32_t part,
                             std::span<const std::byte> payload) {
  wire::header h;
  h.type = wire::msg::push;
  h.key = 7;
  h.part = part;
  const auto before = [&] {
    std::lock_guard lock(pair.in->mu);
    return pair.in->got.size();
  }();
  pair.client->send_partition(h, payload, [] {});
  return pair.in->wait_for(before + 1);
}

bool last_got(test::holder& in, const std::vector<std::byte>& expected) {
  std::lock_guard lock(in.mu);
  return !in.got.empty() && in.got.back() == expected && in.in_place.back();
}

}  // namespace

TEST_CASE(
    "ipc partition slots: one slot per partition - the same memory for its next push - "
    "page aligned - slabs shared once each - a larger push finds none",
    "[ipc]") {
  transport::ipc_detail::partition_slots slots;
  std::vector<std::string> shared;
  auto share = [&](const std::string& path, std::span<std::byte> memory) {
    CHECK(memory.size() >= transport::ipc_detail::partition_slots::slab_bytes);
    shared.push_back(path);
  };
  CHECK(slots.find(1, 0, 4096).empty());
  CHECK(slots.could_make(1, 0));
  REQUIRE(slots.make(1, 0, 300000, share));
  REQUIRE(slots.make(1, 1, 300000, share));
  const auto a = slots.find(1, 0, 300000);
  const auto b = slots.find(1, 1, 300000);
  REQUIRE(a.size() == 300000);
  REQUIRE(b.size() == 300000);
  CHECK(a.data() != b.data());
  CHECK((b.data() >= a.data() + a.size() || a.data() >= b.data() + b.size()));
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 4096 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 4096 == 0);
  // A smaller push uses it too, and so does one that fits its pages (74 of 4096 bytes); a
  // larger one does not.
  CHECK(slots.find(1, 0, 1000).data() == a.data());
  CHECK(slots.find(1, 0, 74 * 4096).data() == a.data());
  CHECK(slots.find(1, 0, 74 * 4096 + 1).empty());
  CHECK_FALSE(slots.make(1, 0, 74 * 4096 + 1, share));
  CHECK_FALSE(slots.could_make(1, 0));  // so a link does not ask again for each push
  CHECK(slots.could_make(1, 2));
  CHECK(shared.size() == 1);
  // One larger than a slab gets a slab of its own.
  const std::size_t big = transport::ipc_detail::partition_slots::slab_bytes + 4096;
  REQUIRE(slots.make(2, 0, big, share));
  CHECK(slots.find(2, 0, big).size() == big);
  CHECK(shared.size() == 2);
  CHECK(shared[0] != shared[1]);
}

TEST_CASE(
    "ipc transport: send_partition goes from the partition's slot by reference once the "
    "peer mapped its slab - each push its own bytes - only from the connecting end",
    "[ipc]") {
  test::ring_pair pair;
  REQUIRE(pair.client->through_shm());
  const std::size_t bytes = std::size_t{1} << 20;
  const auto first = pattern_of(bytes, 1);
  // The first push makes the slot and takes the ring; the next offers the slab; once the peer
  // mapped it, by reference.
  REQUIRE(send_partition_and_wait(pair, 0, first));
  CHECK(last_got(*pair.in, first));
  CHECK(pair.client_net.payloads_through_shm() == 1);
  int seed = 2;
  REQUIRE(test::poll_until(
      [&] {
        const auto next = pattern_of(bytes, seed++);
        return send_partition_and_wait(pair, 0, next) && last_got(*pair.in, next) &&
               pair.client_net.payloads_by_reference() > 0;
      },
      std::chrono::seconds(10)));
  // The partition's next pushes, each with other bytes, after the server let go of the last:
  // the same slot, by reference, each read as what it was sent with.
  for (int k = 0; k < 3; ++k) {
    {
      std::lock_guard lock(pair.in->mu);
      for (auto& h : pair.in->held) h.reset();
    }
    const auto before = pair.client_net.payloads_by_reference();
    const auto next = pattern_of(bytes, 50 + k);
    REQUIRE(send_partition_and_wait(pair, 0, next));
    CHECK(last_got(*pair.in, next));
    CHECK(pair.client_net.payloads_by_reference() == before + 1);
  }
  // A push under min_ipc_answer_bytes (128 KiB) takes the ring as before.
  static_assert((std::size_t{64} << 10) < test::ipc_tcp::min_ipc_answer_bytes);
  const auto ring_before = pair.client_net.payloads_through_shm();
  const auto small = pattern_of(64 << 10, 9);
  REQUIRE(send_partition_and_wait(pair, 1, small));
  CHECK(last_got(*pair.in, small));
  CHECK(pair.client_net.payloads_through_shm() == ring_before + 1);
  // The accepting end (a server's answers) has no slots: its pushes of the same size, sent
  // long enough for a slot to be made, offered and mapped, never go by reference.
  std::atomic<int> answered{0};
  for (int k = 0; k < 20; ++k) {
    wire::header h;
    h.type = wire::msg::push;
    h.key = 8;
    const auto back = pattern_of(bytes, 70 + k);
    pair.accepted->send_partition(h, back, [&answered] { ++answered; });
    REQUIRE(test::poll_until([&] { return answered.load() == k + 1; }, std::chrono::seconds(10)));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(pair.server_net.payloads_by_reference() == 0);
}

TEST_CASE(
    "ipc: 2 workers x 1 server with local::none - pushes of 128 KiB and more go by "
    "reference once their slots are offered - every sum exact",
    "[cluster][ipc]") {
  auto cfg = test::base_config(2, 1);
  cfg.partition_bytes = std::size_t{1} << 20;
  cfg.fusion_bytes = 0;
  auto workers = std::make_shared<test::tally>(), servers = std::make_shared<test::tally>();
  const int rounds = 10;
  const std::vector<std::size_t> sizes{std::size_t{4} << 20};  // 4 partitions of 1 MiB
  const std::vector<dtype> types{dtype::float32};
  test::run_counted(
      cfg,
      [&](test::counted_comm& comm) { test::exact_sums_at(comm, "slots", rounds, sizes, types); },
      workers, servers);
  const std::uint64_t per_round = 2 * 4;
  const std::uint64_t pushes = per_round * rounds;
  // A partition's push goes by TCP until the ring is ready, then by the ring while its slot is
  // made and its slab offered, then by reference: rounds 1 to 3 in a job whose handshakes keep
  // up with its rounds; half of the rounds here, to leave a slow machine time.
  CHECK(workers->by_reference >= pushes / 2);
  // Everything in shared memory was summed where it lay.
  CHECK(servers->in_place == workers->through_shm + workers->by_reference);
  // By TCP only before the rings were ready.
  CHECK(pushes - workers->through_shm - workers->by_reference <= 2 * per_round);
}
