// The emulation itself: each verbs rule it enforces fails loudly (a violation, recorded), each
// fault it injects shows as verbs would show it, and correct use moves exact bytes. The
// transport's tests rely on these, so they are checked here first, through the policy alone.
// Work is carried out by the fabric's progress thread after the post, so the tests wait for
// completions and events (each wait 5 s at most).
#include "emulated_verbs.hpp"

#include <algorithm>
#include <mutex>
#include <cstring>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "emulated_state.hpp"  // the fabric's lock, for a write ordered with the NIC's read
#include "verbs_pair.hpp"

using namespace bps::test::emu;
namespace verbs = bps::transport::verbs;
using namespace std::chrono_literals;

TEST_CASE("emulated verbs: SEND lands in the next posted receive, in order, exact bytes", "[rdma][emulation]") {
  connected_pair p;
  for (std::size_t i = 0; i < 10; ++i) p.mem_a[i] = static_cast<std::byte>(i + 1);
  p.post_recv_b(7, 0, 100);
  p.post_recv_b(8, 100, 100);
  p.send_a(1, 0, 4);
  p.send_a(2, 4, 6);
  auto rx = p.poll_n(p.cq_b, 2);
  REQUIRE(rx.size() == 2);
  CHECK(rx[0].wr_id == 7);
  CHECK(rx[0].byte_len == 4);
  CHECK(rx[1].wr_id == 8);
  CHECK(rx[1].byte_len == 6);
  CHECK(std::memcmp(p.mem_b.data(), p.mem_a.data(), 4) == 0);
  CHECK(std::memcmp(p.mem_b.data() + 100, p.mem_a.data() + 4, 6) == 0);
  auto tx = p.poll_n(p.cq_a, 2);
  REQUIRE(tx.size() == 2);
  CHECK((tx[0].wr_id == 1 && tx[1].wr_id == 2));
  CHECK(tx[0].status == verbs::wc_status::success);
  CHECK(p.net->violations().empty());
}

TEST_CASE("emulated verbs: WRITE WITH IMMEDIATE places bytes at the rkey's address and consumes a receive", "[rdma][emulation]") {
  connected_pair p;
  for (std::size_t i = 0; i < 64; ++i) p.mem_a[i] = static_cast<std::byte>(200 - i);
  p.post_recv_b(9, 0, 0 + 16);
  p.v.post_send(p.a, {3, verbs::send_opcode::write_with_imm, {p.mem_a.data(), 64, p.v.lkey(p.mr_a)},
                      reinterpret_cast<std::uint64_t>(p.mem_b.data() + 512), p.v.rkey(p.mr_b), 0xabcd});
  auto rx = p.poll_n(p.cq_b, 1);
  REQUIRE(rx.size() == 1);
  CHECK(rx[0].opcode == verbs::wc_opcode::recv_with_imm);
  CHECK(rx[0].imm == 0xabcd);
  CHECK(rx[0].byte_len == 64);
  CHECK(std::memcmp(p.mem_b.data() + 512, p.mem_a.data(), 64) == 0);
}

TEST_CASE("emulated verbs: each broken rule is a violation, recorded", "[rdma][emulation]") {
  SECTION("a SEND with no receive posted (receiver not ready)") {
    connected_pair p;
    CHECK_THROWS_WITH(p.send_a(1, 0, 4), Catch::Contains("no receive posted at the peer"));
    CHECK(p.net->violations().size() == 1);
  }
  SECTION("a SEND larger than the receive") {
    connected_pair p;
    p.post_recv_b(1, 0, 8);
    CHECK_THROWS_WITH(p.send_a(1, 0, 9), Catch::Contains("a SEND of 9 bytes into a receive of 8"));
  }
  SECTION("an sge outside its region") {
    connected_pair p;
    p.post_recv_b(1, 0, 8);
    CHECK_THROWS_WITH(p.send_a(1, 1020, 8), Catch::Contains("outside it"));
  }
  SECTION("a WRITE outside the rkey's region") {
    connected_pair p;
    p.post_recv_b(1, 0, 8);
    CHECK_THROWS_WITH(
        p.v.post_send(p.a, {3, verbs::send_opcode::write_with_imm, {p.mem_a.data(), 64, p.v.lkey(p.mr_a)},
                            reinterpret_cast<std::uint64_t>(p.mem_b.data() + 1000), p.v.rkey(p.mr_b), 0}),
        Catch::Contains("outside it"));
  }
  SECTION("a WRITE into a region without remote write") {
    connected_pair p;
    std::vector<std::byte> local_only(64);
    auto* m = p.v.reg_mr(p.dev, local_only, verbs::local_write);
    p.post_recv_b(1, 0, 8);
    CHECK_THROWS_WITH(
        p.v.post_send(p.a, {3, verbs::send_opcode::write_with_imm, {p.mem_a.data(), 8, p.v.lkey(p.mr_a)},
                            reinterpret_cast<std::uint64_t>(local_only.data()), p.v.rkey(m), 0}),
        Catch::Contains("without remote write access"));
    p.v.dereg_mr(m);
  }
  SECTION("posting past the send queue's depth") {
    connected_pair p(16, 2);
    for (int i = 0; i < 2; ++i) p.post_recv_b(i, 8 * i, 8);
    p.send_a(1, 0, 1);
    p.send_a(2, 0, 1);
    CHECK_THROWS_WITH(p.send_a(3, 0, 1), Catch::Contains("past the send queue's depth 2"));
    CHECK(p.poll_n(p.cq_a, 2).size() == 2);  // reaping the completions frees the slots
    CHECK(p.poll_n(p.cq_b, 2).size() == 2);
    p.post_recv_b(3, 0, 8);
    CHECK_NOTHROW(p.send_a(4, 0, 1));
  }
  SECTION("posting past the receive queue's depth") {
    connected_pair p(16, 2);
    p.post_recv_b(1, 0, 8);
    p.post_recv_b(2, 8, 8);
    CHECK_THROWS_WITH(p.post_recv_b(3, 16, 8), Catch::Contains("past the receive queue's depth 2"));
  }
  SECTION("a completion queue overrun (found by the NIC, so recorded rather than thrown)") {
    connected_pair p(2, 4);
    for (int i = 0; i < 3; ++i) p.post_recv_b(i, 8 * i, 8);
    p.send_a(1, 0, 1);
    p.send_a(2, 0, 1);
    p.send_a(3, 0, 1);
    CHECK_THAT(first_violation(*p.net), Catch::Contains("completion queue overrun (2 entries)"));
  }
  SECTION("a SEND before the connection is established") {
    connected_pair p;
    auto* id = p.v.create_id(p.ch, nullptr);
    p.v.resolve_addr(id, "127.0.0.1", p.port, 100ms);
    p.next();
    p.v.resolve_route(id, 100ms);
    p.next();
    p.v.create_qp(id, p.dev, p.cq_a, {2, 2});
    CHECK_THROWS_WITH(p.v.post_send(id, {1, verbs::send_opcode::send, {p.mem_a.data(), 1, p.v.lkey(p.mr_a)}}),
                      Catch::Contains("before the connection was established"));
    p.v.destroy_qp(id);
    p.v.destroy_id(id);
  }
  SECTION("destroying a queue still in use, an id with its queue pair") {
    connected_pair p;
    CHECK_THROWS_WITH(p.v.destroy_cq(p.cq_a), Catch::Contains("queue pair still using it"));
    CHECK_THROWS_WITH(p.v.destroy_id(p.a), Catch::Contains("queue pair not destroyed"));
    CHECK(p.net->violations().size() == 2);
  }
}

TEST_CASE("emulated verbs: armed notification raises one channel event per arm", "[rdma][emulation]") {
  connected_pair p;
  p.v.req_notify_cq(p.cq_b);
  for (int i = 0; i < 2; ++i) p.post_recv_b(i, 8 * i, 8);
  p.send_a(1, 0, 1);
  p.send_a(2, 0, 1);
  REQUIRE(p.settle());
  CHECK(p.v.get_cq_event(p.cc) == p.cq_b);
  CHECK(p.v.get_cq_event(p.cc) == nullptr);  // the second completion came after the event
  CHECK(p.poll(p.cq_b).size() == 2);
}

TEST_CASE("emulated verbs: injected faults show as verbs shows them", "[rdma][emulation]") {
  SECTION("a failed completion: the status, then the pair is in error and flushes") {
    connected_pair p;
    p.net->fail_send({p.port, side::active}, verbs::wc_status::remote_operation_error, 1);
    for (int i = 0; i < 3; ++i) p.post_recv_b(i, 8 * i, 8);
    p.send_a(1, 0, 1);
    p.send_a(2, 0, 1);
    p.send_a(3, 0, 1);
    auto tx = p.poll_n(p.cq_a, 3);
    REQUIRE(tx.size() == 3);
    CHECK(tx[0].status == verbs::wc_status::success);
    CHECK(tx[1].status == verbs::wc_status::remote_operation_error);
    CHECK(tx[2].status == verbs::wc_status::flushed);
    CHECK(p.poll(p.cq_b).size() == 1);  // only the first arrived
  }
  SECTION("a flushed queue: posted receives complete flushed") {
    connected_pair p;
    p.post_recv_b(5, 0, 8);
    p.post_recv_b(6, 8, 8);
    p.net->flush({p.port, side::passive});
    auto rx = p.poll(p.cq_b);
    REQUIRE(rx.size() == 2);
    CHECK((rx[0].wr_id == 5 && rx[0].status == verbs::wc_status::flushed));
    CHECK((rx[1].wr_id == 6 && rx[1].status == verbs::wc_status::flushed));
  }
  SECTION("a disconnect mid-transfer: both ends get DISCONNECTED, later sends fail") {
    connected_pair p;
    p.net->disconnect_after({p.port, side::active}, 1);
    for (int i = 0; i < 2; ++i) p.post_recv_b(i, 8 * i, 8);
    p.send_a(1, 0, 1);
    CHECK(p.next().type == verbs::cm_event_type::disconnected);
    CHECK(p.next().type == verbs::cm_event_type::disconnected);
    p.send_a(2, 0, 1);
    auto tx = p.poll_n(p.cq_a, 2);
    REQUIRE(tx.size() == 2);
    CHECK(tx[1].status == verbs::wc_status::flushed);
  }
  SECTION("a rejected and an unreachable connect") {
    connected_pair p;
    p.net->reject_connects(p.port, 1);
    p.net->unreachable("10.9.9.9", 1);
    auto* id = p.v.create_id(p.ch, nullptr);
    p.v.resolve_addr(id, "10.9.9.9", p.port, 100ms);
    CHECK(p.next().type == verbs::cm_event_type::addr_error);
    p.v.resolve_addr(id, "127.0.0.1", p.port, 100ms);
    p.next();
    p.v.resolve_route(id, 100ms);
    p.next();
    p.v.create_qp(id, p.dev, p.cq_a, {2, 2});
    p.v.connect(id, {});
    auto e = p.next();
    CHECK(e.type == verbs::cm_event_type::rejected);
    CHECK(e.status == 28);
    p.v.destroy_qp(id);
    p.v.destroy_id(id);
  }
  SECTION("a slow peer: completions become visible after the delay") {
    connected_pair p;
    p.net->slow({p.port, side::passive}, 50ms);
    p.post_recv_b(1, 0, 8);
    // Polled until it shows (10 s at most): it must not show before the delay. (Checking once
    // right after the send failed whenever this thread lost its core for 50 ms.)
    const auto sent_at = std::chrono::steady_clock::now();
    p.send_a(1, 0, 1);
    std::size_t seen = 0;
    auto seen_at = sent_at;
    while (seen == 0 && std::chrono::steady_clock::now() < sent_at + 10s) {
      seen = p.poll(p.cq_b).size();
      seen_at = std::chrono::steady_clock::now();  // after the poll: no earlier than it saw
      if (seen == 0) std::this_thread::sleep_for(1ms);
    }
    CHECK(seen == 1);
    CHECK(seen_at - sent_at >= 50ms);
  }
}

TEST_CASE("emulated verbs: RLIMIT_MEMLOCK bounds registration, and devices and RoCE v2 GID", "[rdma][emulation]") {
  auto net = std::make_shared<fabric>();
  emulated_verbs v{{net, "127.0.0.1"}};
  auto* dev = v.open_device("", 1, -1);
  CHECK(v.port(dev).gid_index == 1);
  CHECK(v.port(dev).roce_v2);
  CHECK(v.port(dev).mtu_bytes == 4096);
  net->set_memlock_limit(100);
  std::vector<std::byte> mem(101);
  CHECK_THROWS_WITH(v.reg_mr(dev, mem, verbs::local_write), Catch::Contains("RLIMIT_MEMLOCK"));
  v.close_device(dev);
  CHECK_THROWS_WITH(v.open_device("mlx5_9", 1, -1), Catch::Contains("no device named 'mlx5_9'"));
  net->set_devices({});
  CHECK(v.device_names().empty());
  CHECK(net->live_objects() == 0);
}

TEST_CASE("emulated verbs: the lkey and the rkey differ, each refused where the other belongs", "[rdma][emulation][strict]") {
  connected_pair p;
  CHECK(p.v.lkey(p.mr_b) != p.v.rkey(p.mr_b));
  p.post_recv_b(1, 0, 8);
  SECTION("a WRITE under the peer region's lkey (a transport that sent its lkey as the rkey)") {
    CHECK_THROWS_WITH(
        p.v.post_send(p.a, {3, verbs::send_opcode::write_with_imm, {p.mem_a.data(), 8, p.v.lkey(p.mr_a)},
                            reinterpret_cast<std::uint64_t>(p.mem_b.data()), p.v.lkey(p.mr_b), 0}),
        Catch::Contains("which names no registered region (it is an lkey"));
  }
  SECTION("a send's sge under its region's rkey") {
    CHECK_THROWS_WITH(
        p.v.post_send(p.a, {3, verbs::send_opcode::send, {p.mem_a.data(), 8, p.v.rkey(p.mr_a)}}),
        Catch::Contains("which names no registered region (it is an rkey"));
  }
  CHECK(p.net->violations().size() == 1);
}

TEST_CASE("emulated verbs: access flags are taken exactly as asked, as by a NIC", "[rdma][emulation][strict]") {
  connected_pair p;
  std::vector<std::byte> mem(64);
  SECTION("remote write without local write is EINVAL") {
    CHECK_THROWS_WITH(p.v.reg_mr(p.dev, mem, verbs::remote_write),
                      Catch::Contains("without local write: Invalid argument (EINVAL)"));
  }
  SECTION("nothing added: a region registered without local write takes no receive") {
    auto* m = p.v.reg_mr(p.dev, mem, verbs::remote_read);
    const auto regions = p.net->regions();
    const auto it = std::find_if(regions.begin(), regions.end(),
                                 [&](const auto& r) { return r.addr == mem.data(); });
    REQUIRE(it != regions.end());
    CHECK(it->access == verbs::remote_read);
    CHECK_THROWS_WITH(p.v.post_recv(p.b, {1, {mem.data(), 8, p.v.lkey(m)}}),
                      Catch::Contains("a receive buffer into a region without local write access"));
    p.v.dereg_mr(m);
  }
  SECTION("a WRITE into a region registered with local write only") {
    auto* m = p.v.reg_mr(p.dev, mem, verbs::local_write);
    p.post_recv_b(1, 0, 8);
    CHECK_THROWS_WITH(
        p.v.post_send(p.a, {3, verbs::send_opcode::write_with_imm, {p.mem_a.data(), 8, p.v.lkey(p.mr_a)},
                            reinterpret_cast<std::uint64_t>(mem.data()), p.v.rkey(m), 0}),
        Catch::Contains("without remote write access"));
    p.v.dereg_mr(m);
  }
  CHECK(p.net->violations().size() == 1);
}

TEST_CASE("emulated verbs: work completes later, in order on a queue pair, pairs overtaking each other", "[rdma][emulation][strict]") {
  SECTION("not before its delay") {
    connected_pair p(16, 4, {200ms, 200ms, 1});
    p.post_recv_b(1, 0, 8);
    const auto before = std::chrono::steady_clock::now();
    p.send_a(1, 0, 8);
    CHECK(p.net->work_in_flight() == 1);
    auto rx = p.poll_n(p.cq_b, 1);
    CHECK(std::chrono::steady_clock::now() - before >= 200ms);
    REQUIRE(rx.size() == 1);
  }
  SECTION("two pairs, 20 sends each, posted alternately") {
    constexpr int n = 20;
    connected_pair p(4 * n, n, {0us, 2000us, 7});
    p.connect_second(n);
    for (int i = 0; i < n; ++i) {
      p.v.post_recv(p.b, {static_cast<std::uint64_t>(i), {p.mem_b.data() + 8 * i, 8, p.v.lkey(p.mr_b)}});
      p.v.post_recv(p.b2, {static_cast<std::uint64_t>(i), {p.mem_b.data() + 512 + 8 * i, 8, p.v.lkey(p.mr_b)}});
    }
    for (int i = 0; i < n; ++i) {
      p.v.post_send(p.a, {100u + i, verbs::send_opcode::send, {p.mem_a.data(), 1, p.v.lkey(p.mr_a)}});
      p.v.post_send(p.a2, {200u + i, verbs::send_opcode::send, {p.mem_a.data(), 1, p.v.lkey(p.mr_a)}});
    }
    auto tx = p.poll_n(p.cq_a, 2 * n);
    REQUIRE(tx.size() == 2 * n);
    std::vector<std::uint64_t> order, first, second;
    for (const auto& wc : tx) {
      order.push_back(wc.wr_id);
      (wc.wr_id < 200 ? first : second).push_back(wc.wr_id);
    }
    CHECK(std::is_sorted(first.begin(), first.end()));    // RC: in order within a pair
    CHECK(std::is_sorted(second.begin(), second.end()));
    std::vector<std::uint64_t> as_posted;
    for (int i = 0; i < n; ++i) {
      as_posted.push_back(100u + i);
      as_posted.push_back(200u + i);
    }
    CHECK(order != as_posted);  // across pairs the NIC's order is its own
    CHECK(p.net->violations().empty());
  }
}

TEST_CASE("emulated verbs: a send buffer changed before its completion was reaped is caught", "[rdma][emulation][strict]") {
  SECTION("changed before the NIC read it: recorded, and the request fails") {
    connected_pair p(16, 4, {200ms, 200ms, 1});
    p.post_recv_b(1, 0, 8);
    p.send_a(5, 0, 8);
    {
      // A transport that reused its send buffer at once. Under the fabric's lock so that
      // ThreadSanitizer sees it ordered with the NIC's read: the checksum is what must catch it.
      std::lock_guard lock(p.net->impl().mu);
      p.mem_a[3] = std::byte{0x77};
    }
    CHECK_THAT(first_violation(*p.net),
               Catch::Contains("the send buffer of work request 0x5 (8 bytes at offset 0 of the "
                               "region with lkey") &&
                   Catch::Contains("changed between ibv_post_send and the NIC reading it"));
    auto tx = p.poll_n(p.cq_a, 1);
    REQUIRE(tx.size() == 1);
    CHECK(tx[0].status == verbs::wc_status::general_error);
  }
  SECTION("changed after the NIC read it, before its completion was reaped: poll_cq throws") {
    connected_pair p;
    p.post_recv_b(1, 0, 8);
    p.send_a(6, 16, 8);
    REQUIRE(p.settle());
    p.mem_a[20] = std::byte{0x77};
    CHECK_THROWS_WITH(p.poll_n(p.cq_a, 1),
                      Catch::Contains("changed between ibv_post_send and the reaping of its completion"));
    CHECK(p.net->violations().size() == 1);
  }
  SECTION("changed after its completion was reaped: allowed") {
    connected_pair p;
    p.post_recv_b(1, 0, 8);
    p.send_a(7, 0, 8);
    CHECK(p.poll_n(p.cq_a, 1).size() == 1);
    p.mem_a[3] = std::byte{0x77};
    CHECK(p.poll_n(p.cq_b, 1).size() == 1);
    CHECK(p.net->violations().empty());
  }
}

TEST_CASE("emulated verbs: a receive buffer is the NIC's while posted (poisoned)", "[rdma][emulation][strict]") {
  connected_pair p;
  p.mem_b[0] = std::byte{1};
  p.post_recv_b(1, 0, 8);
  CHECK(p.mem_b[0] == std::byte{0xa5});  // a caller reading a posted slot reads no old message
}

TEST_CASE("emulated verbs: deregistering a region with work in flight is EBUSY", "[rdma][emulation][strict]") {
  SECTION("a send not yet carried out") {
    connected_pair p(16, 4, {200ms, 200ms, 1});
    std::vector<std::byte> mem(64);
    auto* m = p.v.reg_mr(p.dev, mem, 0);
    p.post_recv_b(1, 0, 8);
    p.v.post_send(p.a, {9, verbs::send_opcode::send, {mem.data(), 8, p.v.lkey(m)}});
    CHECK_THROWS_WITH(p.v.dereg_mr(m),
                      Catch::Contains("with 1 posted work request(s) still using it: Device or "
                                      "resource busy (EBUSY)"));
    CHECK(p.poll_n(p.cq_a, 1).size() == 1);  // reaped: the region is free
    CHECK_NOTHROW(p.v.dereg_mr(m));
  }
  SECTION("a send carried out, its completion not reaped") {
    connected_pair p;
    std::vector<std::byte> mem(64);
    auto* m = p.v.reg_mr(p.dev, mem, 0);
    p.post_recv_b(1, 0, 8);
    p.v.post_send(p.a, {9, verbs::send_opcode::send, {mem.data(), 8, p.v.lkey(m)}});
    REQUIRE(p.settle());
    CHECK_THROWS_WITH(p.v.dereg_mr(m), Catch::Contains("(EBUSY)"));
    CHECK(p.poll_n(p.cq_a, 1).size() == 1);
    CHECK_NOTHROW(p.v.dereg_mr(m));
  }
  SECTION("a posted receive, until its queue pair is destroyed") {
    connected_pair p;
    std::vector<std::byte> mem(64);
    auto* m = p.v.reg_mr(p.dev, mem, verbs::local_write);
    p.v.post_recv(p.b, {1, {mem.data(), 8, p.v.lkey(m)}});
    CHECK_THROWS_WITH(p.v.dereg_mr(m), Catch::Contains("(EBUSY)"));
    p.v.destroy_qp(p.b);  // its work requests go with it
    CHECK_NOTHROW(p.v.dereg_mr(m));
  }
}
