// transport::ipc by reference: a payload that lies in memory the sender shares by name goes as
// its place once the peer mapped the name, with no copy into the ring; the local stage's owned
// slices (bps::local::host) so reach a colocated server, which sums them where they lie.
#include "cluster.hpp"
#include "counted_ipc.hpp"
#include "ipc_pair.hpp"
#include "poll_until.hpp"
#include "short_schedule.hpp"
#include "values.hpp"

#include <catch2/catch.hpp>

#include "byteps/detail/buffer_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

using namespace bps;

namespace {

using test::holder;
using test::ring_pair;

// A segment of the test's own, shared by the pair's client as a worker shares its local
// segments; `pattern()` is what it holds.
struct shared_segment {
  std::string name = fmt::format("/bps-test-{}-shared", ::getpid());
  detail::shm_segment segment{name, 1 << 20, 1, 0,
                              std::chrono::steady_clock::now() + std::chrono::seconds(5),
                              "the test's segment"};
  shared_segment() {
    auto* p = segment.data();
    for (std::size_t i = 0; i < (1u << 20); ++i) p[i] = static_cast<std::byte>(i * 7 + 3);
  }
  ~shared_segment() { segment.unlink(); }
  std::span<const std::byte> at(std::size_t offset, std::size_t bytes) const {
    return {segment.data() + offset, bytes};
  }
};

// Sends `payload` on the pair's client link and waits until it came; true if it did.
bool send_and_wait(ring_pair& pair, std::span<const std::byte> payload) {
  wire::header h;
  h.type = wire::msg::push;
  const auto before = [&] {
    std::lock_guard lock(pair.in->mu);
    return pair.in->got.size();
  }();
  pair.client->send(h, payload, [] {});
  return pair.in->wait_for(before + 1);
}

bool last_is(holder& in, std::span<const std::byte> expected, bool in_place) {
  std::lock_guard lock(in.mu);
  return !in.got.empty() && std::equal(in.got.back().begin(), in.got.back().end(),
                                       expected.begin(), expected.end()) &&
         in.in_place.back() == in_place;
}

}  // namespace

TEST_CASE("ipc transport: a payload in memory the sender shares goes by reference once the peer "
          "mapped it - read where it lies, copied out for a receiver that wants a copy",
          "[ipc]") {
  ring_pair pair;
  REQUIRE(pair.client->through_shm());
  shared_segment shared;
  pair.client_net.share_memory(shared.name, shared.segment.whole());
  const auto payload = shared.at(4096, 65536);

  // The first payload in it offers the memory and takes the ring; later ones go by reference
  // once the peer's accept is back.
  REQUIRE(send_and_wait(pair, payload));
  CHECK(pair.client_net.payloads_through_shm() == 1);
  REQUIRE(test::poll_until(
      [&] {
        return send_and_wait(pair, payload) && pair.client_net.payloads_by_reference() > 0;
      },
      std::chrono::seconds(10)));
  CHECK(last_is(*pair.in, payload, true));
  const auto by_ring = pair.client_net.payloads_through_shm();
  const auto by_reference = pair.client_net.payloads_by_reference();

  // Only whole, aligned payloads inside it: the others take the ring.
  REQUIRE(send_and_wait(pair, shared.at(4096 + 8, 65536)));  // off the cache line
  CHECK(last_is(*pair.in, shared.at(4096 + 8, 65536), true));
  const std::vector<std::byte> outside(payload.begin(), payload.end());  // a copy of it
  REQUIRE(send_and_wait(pair, outside));
  CHECK(last_is(*pair.in, payload, true));
  CHECK(pair.client_net.payloads_through_shm() == by_ring + 2);
  CHECK(pair.client_net.payloads_by_reference() == by_reference);

  // A receiver that wants a copy gets the bytes in its own buffer.
  pair.in->wants_in_place = false;
  REQUIRE(send_and_wait(pair, payload));
  CHECK(pair.client_net.payloads_by_reference() == by_reference + 1);
  CHECK(last_is(*pair.in, payload, false));

  // Withdrawn: the ring again.
  pair.client_net.share_memory(shared.name, {});
  REQUIRE(send_and_wait(pair, payload));
  CHECK(pair.client_net.payloads_by_reference() == by_reference + 1);
  CHECK(pair.client_net.payloads_through_shm() == by_ring + 3);
  CHECK(last_is(*pair.in, payload, false));
}

TEST_CASE("ipc transport: a payload said to lie in shared memory the peer never shared closes "
          "the link, saying so",
          "[ipc]") {
  ring_pair pair;
  REQUIRE(pair.client->through_shm());
  wire::header marker;  // what a broken or hostile peer could send: an id never offered
  marker.type = transport::ipc_detail::ipc_shared_payload;
  const auto place = transport::ipc_detail::encode(
      transport::ipc_detail::shared_payload{.id = 77, .offset = 0, .bytes = 65536});
  pair.client->send(marker, place, [] {});
  std::unique_lock lock(pair.in->mu);
  REQUIRE(pair.in->cv.wait_for(lock, std::chrono::seconds(10),
                               [&] { return !pair.in->closed.empty(); }));
  CHECK_THAT(pair.in->closed, Catch::Contains("shared memory 77 that the peer never shared"));
}

TEST_CASE("ipc transport: a control frame larger than any control payload closes the link, "
          "saying so",
          "[ipc]") {
  ring_pair pair;
  REQUIRE(pair.client->through_shm());
  wire::header marker;  // a broken or hostile peer's: a ring place padded to 5000 bytes
  marker.type = transport::ipc_detail::ipc_payload;
  auto padded =
      transport::ipc_detail::encode(transport::ipc_detail::ring_place{.pos = 0, .bytes = 64});
  padded.resize(5000);
  pair.client->send(marker, padded, [] {});
  std::unique_lock lock(pair.in->mu);
  REQUIRE(pair.in->cv.wait_for(lock, std::chrono::seconds(10),
                               [&] { return !pair.in->closed.empty(); }));
  CHECK_THAT(pair.in->closed,
             Catch::Contains("an ipc control frame of 5000 bytes (at most 4096)"));
}

TEST_CASE("ipc transport: memory a peer shares is mapped only by a byteps name, whole, or not at "
          "all - saying why",
          "[ipc]") {
  using transport::ipc_detail::shared_mapping;
  CHECK_THROWS_WITH(shared_mapping("/dev/../etc/passwd", 16),
                    Catch::Contains("is not a byteps shared-memory name"));
  CHECK_THROWS_WITH(shared_mapping("/bps-x/y", 16),
                    Catch::Contains("is not a byteps shared-memory name"));
  CHECK_THROWS_WITH(shared_mapping(fmt::format("/bps-test-{}-never-made", ::getpid()), 16),
                    Catch::Contains("shm_open of shared memory"));
  shared_segment shared;
  CHECK_THROWS_WITH(shared_mapping(shared.name, 4u << 20), Catch::Contains("is smaller than"));
  shared_mapping whole(shared.name, shared.segment.whole().size());
  CHECK(whole.at(64 + 100, 10).size() == 10);
  CHECK(std::equal(shared.at(100, 10).begin(), shared.at(100, 10).end(),
                   whole.at(64 + 100, 10).begin()));
  CHECK(whole.at(shared.segment.whole().size() - 4, 8).empty());  // past the end
  // A descriptor another process holds open: `/proc/<pid>/fd/<fd>`, digits only.
  for (const char* bad : {"/proc/self/fd/3", "/proc/12/fd/x", "/proc/12/fd/", "/proc//fd/3",
                          "/proc/12/fdx/3", "/proc/12/fd/3/../../1/fd/3"})
    CHECK_THROWS_WITH(shared_mapping(bad, 16),
                      Catch::Contains("is not a byteps shared-memory name"));
}

TEST_CASE("ipc transport: a pool buffer in shared memory is mapped by its /proc path and read as "
          "written - small ones stay on the heap",
          "[ipc]") {
  using transport::ipc_detail::shared_mapping;
  detail::buffer_pool pool;
  std::vector<std::pair<std::string, std::span<std::byte>>> shared;
  pool.share_from(4096, [&](const std::string& path, std::span<std::byte> memory) {
    shared.emplace_back(path, memory);
  });
  auto small = pool.take(100);
  CHECK_FALSE(small.shared());
  auto big = pool.take(8192);
  REQUIRE(big.shared());
  REQUIRE(shared.size() == 1);
  CHECK(shared[0].first.starts_with(fmt::format("/proc/{}/fd/", ::getpid())));
  CHECK(shared[0].second.data() == big.span().data());
  for (std::size_t i = 0; i < big.size; ++i) big.data[i] = static_cast<std::byte>(i * 7);
  shared_mapping reader(shared[0].first, shared[0].second.size());
  CHECK(std::equal(big.span().begin(), big.span().end(), reader.at(0, 8192).begin()));
  // Given back and taken again: the same memory, not made or shared anew.
  const auto* where = big.span().data();
  pool.give_back(std::move(big));
  auto again = pool.take(8192);
  CHECK(again.span().data() == where);
  CHECK(shared.size() == 1);
  CHECK_THROWS_WITH(shared_mapping(fmt::format("/proc/{}/fd/999999", ::getpid()), 16),
                    Catch::Contains("open of shared memory"));
  // Many buffers, few descriptors: they are carved from slabs (4 MiB, then 8 MiB), each shared
  // once, and none overlaps another.
  detail::buffer_pool many;
  std::vector<std::span<std::byte>> slabs;
  many.share_from(4096, [&](const std::string&, std::span<std::byte> memory) {
    slabs.push_back(memory);
  });
  std::vector<detail::buffer_pool::buffer> taken;
  for (int i = 0; i < 20; ++i) taken.push_back(many.take(300 * 1024));
  CHECK(slabs.size() == 2);
  std::vector<std::byte*> starts;
  for (const auto& b : taken) {
    REQUIRE(b.shared());
    const bool inside = std::any_of(slabs.begin(), slabs.end(), [&](std::span<std::byte> s) {
      return b.span().data() >= s.data() && b.span().data() + b.size <= s.data() + s.size();
    });
    CHECK(inside);
    starts.push_back(b.span().data());
  }
  std::sort(starts.begin(), starts.end());
  for (std::size_t i = 1; i < starts.size(); ++i) CHECK(starts[i] - starts[i - 1] >= 300 * 1024);
  // A descriptor that is not a pool's memory (another pid namespace's process, a reused pid):
  // refused, not mapped.
  const int other = ::memfd_create("something-else", MFD_CLOEXEC);
  REQUIRE(other >= 0);
  REQUIRE(::ftruncate(other, 8192) == 0);
  CHECK_THROWS_WITH(shared_mapping(fmt::format("/proc/{}/fd/{}", ::getpid(), other), 8192),
                    Catch::Contains("is not a byteps pool's shared memory"));
  ::close(other);
}

TEST_CASE("ipc transport: shared memory is found by address - whole payloads inside a region, "
          "none once it is withdrawn",
          "[ipc]") {
  transport::ipc_detail::shared_regions regions;
  std::vector<std::byte> a(4096), b(4096);
  regions.share("/bps-a", a);
  regions.share("/bps-b", b);
  const auto in_a = regions.find(std::span(a).subspan(100, 200));
  REQUIRE(in_a);
  CHECK(in_a->offset == 100);
  CHECK(regions.name_of(in_a->id)->name == "/bps-a");
  CHECK(regions.name_of(in_a->id)->bytes == 4096);
  const auto in_b = regions.find(std::span(b).subspan(4000, 96));
  REQUIRE(in_b);
  CHECK(in_b->id != in_a->id);
  std::vector<std::byte> elsewhere(64);
  CHECK_FALSE(regions.find(elsewhere));
  CHECK_FALSE(regions.find(std::span(a.data() + 4000, 97)));  // runs past the end
  regions.share("/bps-a", {});
  CHECK_FALSE(regions.find(std::span(a).subspan(100, 200)));
  CHECK_FALSE(regions.name_of(in_a->id));
  CHECK(regions.find(std::span(b).subspan(0, 10)));
}

TEST_CASE("ipc: local::host's owned slices reach the colocated servers by reference and are "
          "summed where they lie - every dtype, exact sums",
          "[cluster][ipc]") {
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 65536;
  cfg.fusion_bytes = 0;  // one push per payload, so the counts below match one to one
  auto workers = std::make_shared<test::tally>(), servers = std::make_shared<test::tally>();
  const int rounds = test::rounds(3, 2);
  // 8 MiB only in the plain suite (37 s of TSan's time with it, on 2 cores).
  std::vector<std::size_t> sizes{std::size_t{64} << 10, std::size_t{1} << 20};
  if (!test::short_schedule) sizes.push_back(std::size_t{8} << 20);
  using comm_t = test::counted_comm_of<local::host>;
  test::run_counted<comm_t>(
      cfg,
      [&](comm_t& comm) { test::exact_sums_at(comm, "shared", rounds, sizes); },
      workers, servers, {2, 2});
  CHECK(workers->by_reference > 0);
  // Every push in shared memory was summed where it lay, by reference or in a ring.
  CHECK(servers->in_place == workers->through_shm + workers->by_reference);
  // A segment's pushes take the ring only until the server mapped it, in its first round.
  CHECK(workers->through_shm * static_cast<std::uint64_t>(rounds - 1) <= workers->by_reference);
  CHECK(servers->by_reference == 0);  // answers are copied: the servers share nothing
}

TEST_CASE("ipc transport: pool buffers go into shared memory only once a peer on the host "
          "connected - a server on a host of its own keeps them on the heap",
          "[ipc]") {
  detail::buffer_pool pool;
  int slabs = 0;
  bool peer_here = false;
  pool.share_from(
      4096, [&](const std::string&, std::span<std::byte>) { ++slabs; }, [&] { return peer_here; });
  auto alone = pool.take(8192);
  CHECK_FALSE(alone.shared());
  CHECK(slabs == 0);
  peer_here = true;
  auto colocated = pool.take(16384);
  CHECK(colocated.shared());
  CHECK(slabs == 1);
  // What share_pool asks a server's ipc transport: true on the end that accepted a peer on its
  // host, from its hello on; never on the end that connected.
  test::ring_pair pair;
  CHECK(pair.server_net.peer_on_host());
  CHECK_FALSE(pair.client_net.peer_on_host());
  test::ipc_tcp lone{test::base_config(1, 1)};
  CHECK_FALSE(lone.peer_on_host());
}
