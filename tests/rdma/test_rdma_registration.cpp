// Registered memory and cached places over RDMA on the emulation, counted by the transport
// (rdma_msg::counters): a registered destination is written in place, one its receiver says
// stays is advertised once and later rounds go without announce or grant; a place that moves is
// copied and re-advertised; the worker and the server register their buffers, so a cluster's
// pushes and answers after the first round make no new advertisement and nothing goes through
// staging.
#include <algorithm>
#include <byteps/bodies.hpp>
#include <catch2/catch.hpp>

#include "../cluster/cluster.hpp"
#include "../cluster/run_cluster.hpp"
#include "rdma_pair.hpp"

using namespace bps;
using namespace bps::test;

namespace {

// Destinations at fixed places of one arena, one per key (moved on request); says they stay
// when `stays` is set.
class placed_receiver final : public transport::receiver, public transport::cached_destinations {
 public:
  placed_receiver(std::vector<std::byte>& arena, bool stays) : arena_(arena), stays_(stays) {}
  transport::receiver_capabilities capabilities() override { return {.cached = this}; }
  std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
    std::lock_guard lock(mu_);
    return std::span(arena_).subspan(offsets_[h.key], h.payload_bytes);
  }
  bool destination_stays(const wire::header&, std::span<const std::byte>) override {
    return stays_;
  }
  void on_message(const wire::header& h, std::span<std::byte> payload) override {
    {
      std::lock_guard lock(mu_);
      got_.emplace_back(h.key, std::vector<std::byte>(payload.begin(), payload.end()));
      in_place_.push_back(payload.data() == arena_.data() + offsets_[h.key]);
    }
    cv_.notify_all();
  }
  void on_close(const std::string&) override {}

  void place(std::uint64_t key, std::size_t offset) {
    std::lock_guard lock(mu_);
    offsets_[key] = offset;
  }
  // The n-th frame (waits up to 10 s): its bytes and whether they were where it was asked.
  std::pair<std::vector<std::byte>, bool> frame(std::size_t n) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, 10s, [&] { return got_.size() > n; }))
      throw std::runtime_error(fmt::format("frame {} did not arrive in 10 s", n));
    return {got_[n].second, in_place_[n]};
  }

 private:
  std::vector<std::byte>& arena_;
  bool stays_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, std::size_t> offsets_;
  std::vector<std::pair<std::uint64_t, std::vector<std::byte>>> got_;
  std::vector<bool> in_place_;
};

// Two transports on one fabric; the server's end of their one link starts `rx`. `arena` (the
// receiver's) and `out` (the sender's) are registered when asked.
struct placed_pair {
  placed_pair(std::shared_ptr<emu::fabric> net, std::vector<std::byte>& arena,
              std::vector<std::byte>& out, bool stays, bool register_arena)
      : server(quiet_config(), emu_options(net)),
        client(quiet_config(), emu_options(net)),
        rx(std::make_shared<placed_receiver>(arena, stays)),
        out_(out) {
    rx->place(7, 0);
    if (register_arena) server.register_memory(arena);
    client.register_memory(out);
    std::promise<void> accepted;
    const auto port = server.listen("127.0.0.1", 0, [&](std::shared_ptr<emu_rdma::link> l) {
      l->start(rx);
      accepted.set_value();
    });
    link = client.connect("127.0.0.1", port, 5s);
    link->start(std::make_shared<recorder>());
    if (accepted.get_future().wait_for(5s) != std::future_status::ready)
      throw std::runtime_error("no connection accepted in 5 s");
  }
  ~placed_pair() {
    client.stop();
    server.stop();
  }

  // Round r: key 7's frame with round r's pattern; checks it arrived exact and in place.
  void round(int r) {
    auto want = pattern(static_cast<std::uint64_t>(r), out_.size());
    std::copy(want.begin(), want.end(), out_.begin());
    wire::header h;
    h.type = wire::msg::pull_response;
    h.key = 7;
    sent_counter sent;
    link->send(h, std::span(out_), sent.make(0));
    REQUIRE(sent.wait_all());
    auto [bytes, in_place] = rx->frame(static_cast<std::size_t>(r));
    CHECK(bytes == want);
    CHECK(in_place);
  }

  emu_rdma server, client;
  std::shared_ptr<placed_receiver> rx;
  std::shared_ptr<emu_rdma::link> link;
  std::vector<std::byte>& out_;
};

}  // namespace

TEST_CASE("rdma registration: a place that stays is advertised once - later rounds skip the grant",
          "[rdma][registration]") {
  auto net = std::make_shared<emu::fabric>();
  constexpr std::size_t n = 20000;  // announced: above the 432-byte inline limit
  std::vector<std::byte> arena(4 * n), out(n);
  placed_pair p(net, arena, out, true, true);
  auto& client = p.client;
  auto& server = p.server;
  auto round = [&](int r) { p.round(r); };

  round(0);  // announced, granted in place, advertised
  auto c = client.counters();
  auto s = server.counters();
  CHECK(c.announced == 1);
  CHECK(c.cached == 0);
  CHECK(s.granted_in_place == 1);
  CHECK(s.advertised == 1);
  CHECK(c.writes_from_payload == 1);
  CHECK(c.writes_staged == 0);

  for (int r = 1; r <= 4; ++r) round(r);  // straight to the cached place
  c = client.counters();
  s = server.counters();
  CHECK(c.announced == 1);         // no new announce ...
  CHECK(c.cached == 4);            // ... four frames to the cached place
  CHECK(s.granted_in_place == 1);  // no new grant
  CHECK(s.advertised == 1);        // no new advertisement
  CHECK(s.moved == 0);
  CHECK(c.writes_from_payload == 5);
  CHECK(c.writes_staged == 0);
  CHECK(s.granted_staged == 0);

  // The receiver moves key 7: round 5 lands in the old place and is moved, exact, and the place
  // is revoked; round 6 asks again (and advertises the new place); round 7 uses it.
  p.rx->place(7, 2 * n);
  round(5);
  s = server.counters();
  CHECK(s.moved == 1);
  // The revoke reaches the sender on its own thread: until it does, a frame may still go to the
  // old place (and be moved again). Wait for it, so round 6 asks.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (client.counters().forgotten == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  REQUIRE(client.counters().forgotten == 1);
  round(6);
  c = client.counters();
  s = server.counters();
  CHECK(c.announced == 2);
  CHECK(s.advertised == 2);
  round(7);
  c = client.counters();
  CHECK(c.cached == 6);  // rounds 1-4, 5 (to the old place), 7
  CHECK(c.announced == 2);
  CHECK(net->violations().empty());
}

TEST_CASE("rdma registration: a place not said to stay is asked for every round",
          "[rdma][registration]") {
  auto net = std::make_shared<emu::fabric>();
  std::vector<std::byte> arena(20000), out(20000);
  placed_pair p(net, arena, out, false, true);
  for (int r = 0; r < 4; ++r) p.round(r);
  const auto c = p.client.counters();
  const auto s = p.server.counters();
  CHECK(c.announced == 4);
  CHECK(c.cached == 0);
  CHECK(s.granted_in_place == 4);  // each round written in place, each after its own grant
  CHECK(s.advertised == 0);
  CHECK(c.writes_from_payload == 4);
  CHECK(net->violations().empty());
}

TEST_CASE("rdma registration: unregistered memory goes through staging and is never advertised",
          "[rdma][registration]") {
  auto net = std::make_shared<emu::fabric>();
  std::vector<std::byte> arena(20000), out(20000);
  placed_pair p(net, arena, out, true, false);  // says it stays, but nobody registered it
  for (int r = 0; r < 3; ++r) p.round(r);
  const auto c = p.client.counters();
  const auto s = p.server.counters();
  CHECK(c.announced == 3);
  CHECK(c.cached == 0);
  CHECK(s.advertised == 0);
  CHECK(s.granted_in_place == 0);
  CHECK(s.granted_staged == 9);  // 20000 bytes in 8 KiB windows: 3 a round
  CHECK(net->violations().empty());
}

TEST_CASE(
    "rdma registration: a cluster's pushes and answers are advertised once per partition, "
    "never staged",
    "[rdma][registration][cluster]") {
  using comm_t = Communicator<emu_rdma, local::none, partition::by_bytes, schedule::priority>;
  constexpr int workers = 2, servers = 2, rounds = 5;
  constexpr std::size_t n = 262144;  // 1 MiB of fp32: 16 partitions of 64 KiB
  constexpr int parts = 16;
  Config base = base_config(workers, servers);
  base.partition_bytes = 65536;
  base.server_chunk_bytes = 0;  // whole answers
  auto worker_tally = std::make_shared<transport::rdma_msg::tally>();
  auto server_tally = std::make_shared<transport::rdma_msg::tally>();
  auto with_tally = [](const Config& c, std::shared_ptr<transport::rdma_msg::tally> t) {
    auto o = emu_rdma::options::from(c);
    o.tally = std::move(t);
    return o;
  };
  test::run_cluster<emu_rdma, comm_t, emu_rdma>(
      base, std::vector<int>(workers, 1),
      [&](comm_t& comm) {
        const int w = comm.rank();
        std::vector<float> arena(n);  // the trainer's gradients, registered once
        comm.register_memory(std::as_writable_bytes(std::span(arena)));
        for (int r = 0; r < rounds; ++r) {
          for (std::size_t i = 0; i < n; ++i)
            arena[i] = static_cast<float>(w + r + static_cast<int>(i % 512));
          comm.push_pull("grad", std::span(arena)).wait();
          for (std::size_t i = 0; i < n; ++i) {
            const float expect = static_cast<float>(1 + 2 * r + 2 * static_cast<int>(i % 512));
            BPS_EXPECT(arena[i] == expect, "worker {} round {} grad[{}] = {}, expected {}", w, r, i,
                       arena[i], expect);
          }
        }
      },
      {},
      [&](const Config& c) {
        return with_tally(c, c.node_role == role::server ? server_tally : worker_tally);
      });
  const auto wc = worker_tally->snapshot();
  const auto sc = server_tally->snapshot();
  constexpr int per_round = workers * parts;  // pushes (and answers) per round, all workers
  // Pushes: round 0 asks for each partition's place, and the server advertises its landing
  // buffer for that worker; rounds 1-4 write straight there. All written from the registered
  // arena into the servers' registered landing buffers.
  CHECK(wc.announced == per_round);
  CHECK(wc.cached == per_round * (rounds - 1));
  CHECK(sc.granted_in_place == per_round);
  CHECK(sc.advertised == per_round);
  CHECK(sc.moved == 0);
  CHECK(wc.forgotten == 0);
  CHECK(wc.writes_from_payload == per_round * rounds);
  CHECK(wc.writes_staged == 0);
  CHECK(sc.granted_staged == 0);
  // Answers: round 0 asks for each partition's place and the worker advertises it; rounds 1-4
  // write straight there. No answer is staged on either side.
  CHECK(sc.announced == per_round);
  CHECK(sc.cached == per_round * (rounds - 1));
  CHECK(wc.granted_in_place == per_round);
  CHECK(wc.advertised == per_round);
  CHECK(wc.moved == 0);
  CHECK(wc.granted_staged == 0);
  CHECK(sc.writes_from_payload == per_round * rounds);  // from the sum buffers, registered
  CHECK(sc.writes_staged == 0);
  CHECK(sc.forgotten == 0);
  CHECK(emu::fabric::shared_default()->violations().empty());
}

TEST_CASE("rdma registration: registered memory takes remote writes and allows no remote read",
          "[rdma][registration]") {
  // Nothing issues an RDMA READ: with remote read, any peer given the rkey could read the whole
  // region (a trainer's gradients, a server's sums).
  auto net = std::make_shared<emu::fabric>();
  emu_rdma t(quiet_config(), emu_options(net));
  std::vector<std::byte> arena(4096);
  t.register_memory(arena);
  const auto regions = net->regions();
  const auto it = std::find_if(regions.begin(), regions.end(),
                               [&](const auto& r) { return r.addr == arena.data(); });
  REQUIRE(it != regions.end());
  CHECK(it->access == (transport::verbs::local_write | transport::verbs::remote_write));
  t.stop();
  CHECK(net->violations().empty());
}
