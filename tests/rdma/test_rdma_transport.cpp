// transport::basic_rdma over the emulated verbs: the bps::Transport contract as the TCP tests
// check it (order, exact bytes, payload straight into payload_destination, on_sent exactly once
// and never inside send, on_close once after the last on_message), plus what is RDMA's own:
// credits under a slow peer, the staging area for unregistered memory, direct writes into
// registered memory, progress per written piece, the memlock check, and each injected fault
// closing only its own link with a reason. Every test ends with the fabric reporting no broken
// verbs rule and, after stop(), no verbs object left.
#include "rdma_pair.hpp"

#include <catch2/catch.hpp>

using namespace bps;
using namespace bps::test;

static_assert(bps::Transport<emu_rdma>);

namespace {

// Sizes around every path: empty, inline, the inline limit's edge (slot 512 - 16 - 64 = 432),
// announced and written through 8 KiB staging windows (several), and 1 MiB + 12 bytes.
const std::size_t sizes[] = {0, 1, 431, 432, 433, 8192, 20011, (1u << 20) + 12};

void check_clean(emu::fabric& net) {
  CHECK(net.violations().empty());
}

}  // namespace

TEST_CASE("rdma transport: frames of every size arrive in order, exact, in place, and on_sent once, never inside send", "[rdma][transport]") {
  auto net = std::make_shared<emu::fabric>();
  {
    rdma_pair p(emu_options(net));
    p.connect_one();
    std::vector<std::vector<std::byte>> payloads;
    for (std::size_t i = 0; i < std::size(sizes); ++i) payloads.push_back(pattern(i, sizes[i]));
    sent_counter sent;
    for (int dir = 0; dir < 2; ++dir)  // client to server, then server to client
      for (std::size_t i = 0; i < payloads.size(); ++i)
        send_frame(dir ? *p.accepted[0] : *p.client[0], i, payloads[i],
                   sent.make(dir * payloads.size() + i));
    REQUIRE(p.server_rx[0]->wait_messages(payloads.size()));
    REQUIRE(p.client_rx[0]->wait_messages(payloads.size()));
    REQUIRE(sent.wait_all());
    for (auto* rx : {p.server_rx[0].get(), p.client_rx[0].get()}) {
      auto frames = rx->frames();
      REQUIRE(frames.size() == payloads.size());
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        CAPTURE(i, sizes[i]);
        CHECK(frames[i].header.key == i);
        CHECK(frames[i].header.payload_bytes == sizes[i]);
        CHECK(frames[i].in_place);
        CHECK(frames[i].bytes == payloads[i]);
      }
    }
    std::lock_guard lock(sent.mu);
    CHECK(sent.calls == std::vector<int>(2 * payloads.size(), 1));
    CHECK_FALSE(sent.inside_send);
  }
  check_clean(*net);
  CHECK(net->live_objects() == 0);
  CHECK(net->pinned_bytes() == 0);
}

TEST_CASE("rdma transport: registered memory is written directly (one WRITE), unregistered through staging windows", "[rdma][transport]") {
  auto net = std::make_shared<emu::fabric>();
  constexpr std::size_t n = 65536;  // 8 staging windows of 8 KiB
  const auto payload = pattern(3, n);
  SECTION("neither end registered: 8 windows, 8 writes") {
    rdma_pair p(emu_options(net));
    p.connect_one();
    send_frame(*p.client[0], 3, payload);
    REQUIRE(p.server_rx[0]->wait_messages(1));
    CHECK(p.server_rx[0]->frames()[0].bytes == payload);
    CHECK(net->writes_posted({p.port, emu::side::active}) == 8);
  }
  SECTION("both ends registered: one write straight into the receiver's arena") {
    // Both buffers outlive the pair: the sender reads `source` until its completion is reaped,
    // which may come after the receiver has the frame.
    std::vector<std::byte> arena(2 * n), source = payload;
    rdma_pair p(emu_options(net));
    p.server_net.register_memory(arena);
    p.client_net.register_memory(source);
    p.connect_one();
    p.server_rx[0]->use_arena(&arena);
    sent_counter sent;
    send_frame(*p.client[0], 3, source, sent.make(0));
    REQUIRE(p.server_rx[0]->wait_messages(1));
    REQUIRE(sent.wait_all());
    CHECK(p.server_rx[0]->frames()[0].bytes == payload);
    CHECK(std::equal(payload.begin(), payload.end(), arena.begin()));
    CHECK(net->writes_posted({p.port, emu::side::active}) == 1);
  }
  check_clean(*net);
  CHECK(net->live_objects() == 0);
}

TEST_CASE("rdma transport: a receiver asking for progress hears it per written piece", "[rdma][transport]") {
  auto net = std::make_shared<emu::fabric>();
  constexpr std::size_t step = 4096, n = 10 * step + 12;
  const auto payload = pattern(5, n);  // outlives the pair: the transport reads it until on_sent
  {
    rdma_pair p(emu_options(net));
    std::vector<std::byte> arena(n);
    p.server_net.register_memory(arena);
    p.connect_one();
    p.server_rx[0]->use_arena(&arena);
    p.server_rx[0]->ask_progress(step);
    send_frame(*p.client[0], 5, payload);
    REQUIRE(p.server_rx[0]->wait_messages(1));
    auto f = p.server_rx[0]->frames()[0];
    std::vector<std::size_t> expected;
    for (std::size_t at = step; at < n; at += step) expected.push_back(at);
    CHECK(f.progress == expected);
    CHECK(f.bytes == pattern(5, n));
    CHECK(net->writes_posted({p.port, emu::side::active}) == 11);
  }
  check_clean(*net);
}

TEST_CASE("rdma transport: credits keep 2000 frames from overrunning 8 receives, with a slow peer too", "[rdma][transport]") {
  auto net = std::make_shared<emu::fabric>();
  {
    rdma_pair p(emu_options(net));
    p.connect_one();
    net->slow({p.port, emu::side::passive}, 2ms);
    std::vector<std::vector<std::byte>> payloads;
    for (std::uint64_t k = 0; k < 2000; ++k) payloads.push_back(pattern(k, k % 3 == 0 ? 600 : 40));
    for (std::uint64_t k = 0; k < payloads.size(); ++k) send_frame(*p.client[0], k, payloads[k]);
    REQUIRE(p.server_rx[0]->wait_messages(payloads.size(), 60s));
    auto frames = p.server_rx[0]->frames();
    for (std::uint64_t k = 0; k < payloads.size(); ++k) {
      CAPTURE(k);
      REQUIRE(frames[k].header.key == k);
      REQUIRE(frames[k].bytes == payloads[k]);
    }
  }
  check_clean(*net);  // no receiver-not-ready, no queue past its depth, no overrun
}

TEST_CASE("rdma transport: close runs on_close once on both ends, and a send on a closed link gets on_sent once", "[rdma][transport]") {
  auto net = std::make_shared<emu::fabric>();
  {
    rdma_pair p(emu_options(net));
    p.connect_one();
    const auto small = pattern(1, 10);
    send_frame(*p.client[0], 1, small);
    REQUIRE(p.server_rx[0]->wait_messages(1));
    p.client[0]->close();
    REQUIRE(p.client_rx[0]->wait_closed());
    REQUIRE(p.server_rx[0]->wait_closed());
    CHECK(p.client_rx[0]->reason() == "closed locally");
    CHECK(p.server_rx[0]->reason() == "connection closed by " + p.accepted[0]->peer());
    sent_counter sent;
    send_frame(*p.client[0], 2, small, sent.make(0));
    REQUIRE(sent.wait_all());
    std::this_thread::sleep_for(50ms);
    CHECK(p.client_rx[0]->closes() == 1);
    CHECK(p.server_rx[0]->closes() == 1);
    std::lock_guard lock(sent.mu);
    CHECK(sent.calls == std::vector<int>{1});
  }
  check_clean(*net);
  CHECK(net->live_objects() == 0);
}

TEST_CASE("rdma transport: too low a RLIMIT_MEMLOCK is a clear error at start", "[rdma][transport]") {
  auto net = std::make_shared<emu::fabric>();
  net->set_memlock_limit(64 * 1024);
  auto o = emu_options(net);
  o.staging_bytes = 1 << 20;
  CHECK_THROWS_WITH(emu_rdma(quiet_config(), o),
                    Catch::Contains("RLIMIT_MEMLOCK is 65536 bytes") &&
                        Catch::Contains("ulimit -l unlimited"));
  net->set_devices({});
  CHECK_THROWS_WITH(emu_rdma(quiet_config(), emu_options(net)),
                    Catch::Contains("no RDMA device found"));
  auto bad = emu_options(net);
  bad.rx_depth = 2;
  CHECK_THROWS_AS(emu_rdma(quiet_config(), bad), bps::usage_error);
  CHECK(net->live_objects() == 0);
}
