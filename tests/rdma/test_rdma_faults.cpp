// Each fault the emulation injects, under transport::basic_rdma: the link it hits closes with a
// reason that names it, on both ends, exactly once, every on_sent still runs exactly once, and
// the other link of the same transports keeps carrying exact frames. Connect faults are a
// communicator_error naming the address, retried until the deadline.
#include "rdma_pair.hpp"

#include <catch2/catch.hpp>

using namespace bps;
using namespace bps::test;

namespace {

// Two links; `inject` breaks the first one (connection 0 to the port, in the emulation's names)
// while `size`-byte frames go over it; then both ends of link 0 must be closed with reasons
// matching `client_reason` / `server_reason` (regular expressions: which end notices first may
// vary, and both reasons are true), and link 1 must still work.
template <class Inject>
void fault_closes_only_its_link(std::size_t size, Inject inject, const std::string& client_reason,
                                const std::string& server_reason) {
  auto net = std::make_shared<emu::fabric>();
  {
    rdma_pair p(emu_options(net));
    p.connect_one();
    p.connect_one();
    inject(*net, p.port);
    const auto payload = pattern(7, size);
    sent_counter sent;
    for (std::size_t i = 0; i < 5; ++i) send_frame(*p.client[0], i, payload, sent.make(i));
    REQUIRE(p.client_rx[0]->wait_closed());
    REQUIRE(p.server_rx[0]->wait_closed());
    REQUIRE(sent.wait_all());
    CHECK_THAT(p.client_rx[0]->reason(), Catch::Matches(client_reason));
    CHECK_THAT(p.server_rx[0]->reason(), Catch::Matches(server_reason));
    for (auto& f : p.server_rx[0]->frames())  // what was delivered before the fault is exact
      if (f.bytes.size() == size) CHECK(f.bytes == payload);
    std::this_thread::sleep_for(20ms);
    CHECK(p.client_rx[0]->closes() == 1);
    CHECK(p.server_rx[0]->closes() == 1);
    {
      std::lock_guard lock(sent.mu);
      CHECK(sent.calls == std::vector<int>(5, 1));
    }
    // The other link is untouched.
    const auto other = pattern(9, size);
    send_frame(*p.client[1], 9, other);
    REQUIRE(p.server_rx[1]->wait_messages(1));
    CHECK(p.server_rx[1]->frames()[0].bytes == other);
    CHECK(p.client_rx[1]->closes() == 0);
    CHECK(p.server_rx[1]->closes() == 0);
  }
  CHECK(net->violations().empty());
  CHECK(net->live_objects() == 0);
}

}  // namespace

TEST_CASE("rdma faults: a failed completion closes its link with the status", "[rdma][faults]") {
  for (std::size_t size : {100, 20000}) {
    CAPTURE(size);
    fault_closes_only_its_link(
        size,
        [](emu::fabric& net, std::uint16_t port) {
          net.fail_send({port, emu::side::active, 0},
                        bps::transport::verbs::wc_status::remote_operation_error, 2);
        },
        "connection to 127\\.0\\.0\\.1:\\d+ failed: remote operation error",
        "connection closed by 127\\.0\\.0\\.1:\\d+"
        "( in the middle of a push frame \\((0|8192|16384) of its 20000 payload bytes\\))?");
  }
}

TEST_CASE("rdma faults: a flushed queue closes its link", "[rdma][faults]") {
  fault_closes_only_its_link(
      100, [](emu::fabric& net, std::uint16_t port) { net.flush({port, emu::side::passive, 0}); },
      "connection (closed by .*|to .* failed: transport retry counter exceeded)",
      "connection (closed by .*|to .* failed: work request flushed.*)");
}

TEST_CASE("rdma faults: a disconnect mid-transfer closes its link on both ends", "[rdma][faults]") {
  fault_closes_only_its_link(
      20000,
      [](emu::fabric& net, std::uint16_t port) { net.disconnect_after({port, emu::side::active, 0}, 3); },
      "connection (closed by 127\\.0\\.0\\.1:\\d+|to 127\\.0\\.0\\.1:\\d+ failed: work request flushed.*)",
      "connection (closed by 127\\.0\\.0\\.1:\\d+|to 127\\.0\\.0\\.1:\\d+ failed: transport retry counter exceeded)"
      "( in the middle of a push frame \\((0|8192|16384) of its 20000 payload bytes\\))?");
}

TEST_CASE("rdma faults: a rejected connect is retried until the deadline, then names the address", "[rdma][faults]") {
  auto net = std::make_shared<emu::fabric>();
  {
    rdma_pair p(emu_options(net));
    net->reject_connects(p.port, 3);  // three refusals, then it is accepted
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_NOTHROW(p.connect_one());
    CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);  // three pauses of 100 ms
    net->reject_connects(p.port, 1000);
    CHECK_THROWS_WITH(p.client_net.connect("127.0.0.1", p.port, 500ms),
                      Catch::Contains("could not connect to 127.0.0.1:" + std::to_string(p.port)) &&
                          Catch::Contains("rejected by"));
    CHECK_THROWS_AS(p.client_net.connect("127.0.0.1", 1, 300ms), bps::communicator_error);
  }
  CHECK(net->violations().empty());
  CHECK(net->live_objects() == 0);
}

TEST_CASE("rdma faults: an unreachable address is a communicator_error naming it", "[rdma][faults]") {
  auto net = std::make_shared<emu::fabric>();
  {
    rdma_pair p(emu_options(net));
    net->unreachable("10.1.2.3", 1000);
    CHECK_THROWS_WITH(p.client_net.connect("10.1.2.3", p.port, 300ms),
                      Catch::Contains("10.1.2.3") && Catch::Contains("ADDR_ERROR"));
  }
  CHECK(net->violations().empty());
  CHECK(net->live_objects() == 0);
}
