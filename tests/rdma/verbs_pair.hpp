#pragma once
// The emulated verbs' own tests' fixture (test_emulated_verbs.cpp): two ids connected through
// the emulated connection manager on one fabric, and a wait for the fabric's first violation.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "emulated_verbs.hpp"

namespace bps::test::emu {

// Two connected ids on one fabric, set up through the connection manager's events, with one
// registered region each (1 KiB, local and remote write) and a completion queue of `cq_depth`.
struct connected_pair {
  std::shared_ptr<fabric> net = std::make_shared<fabric>();
  emulated_verbs v{{net, "127.0.0.1"}};
  emulated_verbs::device* dev = v.open_device("", 1, -1);
  emulated_verbs::comp_channel* cc = v.create_comp_channel(dev);
  emulated_verbs::cq* cq_a = nullptr;
  emulated_verbs::cq* cq_b = nullptr;
  emulated_verbs::event_channel* ch = v.create_event_channel();
  emulated_verbs::cm_id* listener = v.create_id(ch, nullptr);
  emulated_verbs::cm_id* a = v.create_id(ch, nullptr);
  emulated_verbs::cm_id* b = nullptr;
  std::vector<std::byte> mem_a = std::vector<std::byte>(1024), mem_b = std::vector<std::byte>(1024);
  emulated_verbs::mr* mr_a = nullptr;
  emulated_verbs::mr* mr_b = nullptr;
  std::uint16_t port = 0;

  explicit connected_pair(int cq_depth = 16, std::uint32_t depth = 4, fabric::timing t = {}) {
    net->set_timing(t);
    cq_a = v.create_cq(dev, cc, cq_depth);
    cq_b = v.create_cq(dev, cc, cq_depth);
    mr_a = v.reg_mr(dev, mem_a, verbs::local_write | verbs::remote_write);
    mr_b = v.reg_mr(dev, mem_b, verbs::local_write | verbs::remote_write);
    port = v.listen(listener, "127.0.0.1", 0);
    v.resolve_addr(a, "127.0.0.1", port, std::chrono::milliseconds(100));
    REQUIRE(next().type == verbs::cm_event_type::addr_resolved);
    v.resolve_route(a, std::chrono::milliseconds(100));
    REQUIRE(next().type == verbs::cm_event_type::route_resolved);
    v.create_qp(a, dev, cq_a, {depth, depth});
    const std::byte hello[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
    v.connect(a, hello);
    auto req = next();
    REQUIRE(req.type == verbs::cm_event_type::connect_request);
    REQUIRE(req.private_data.size() == 3);
    REQUIRE(req.listen_id == listener);
    b = req.id;
    v.create_qp(b, dev, cq_b, {depth, depth});
    v.accept(b, {});
    REQUIRE(next().type == verbs::cm_event_type::established);
    REQUIRE(next().type == verbs::cm_event_type::established);
  }
  // A second connection to the same listener, its pairs on the same queues as the first.
  emulated_verbs::cm_id* a2 = nullptr;
  emulated_verbs::cm_id* b2 = nullptr;
  void connect_second(std::uint32_t depth) {
    a2 = v.create_id(ch, nullptr);
    v.resolve_addr(a2, "127.0.0.1", port, std::chrono::milliseconds(100));
    REQUIRE(next().type == verbs::cm_event_type::addr_resolved);
    v.resolve_route(a2, std::chrono::milliseconds(100));
    REQUIRE(next().type == verbs::cm_event_type::route_resolved);
    v.create_qp(a2, dev, cq_a, {depth, depth});
    v.connect(a2, {});
    auto req = next();
    REQUIRE(req.type == verbs::cm_event_type::connect_request);
    b2 = req.id;
    v.create_qp(b2, dev, cq_b, {depth, depth});
    v.accept(b2, {});
    REQUIRE(next().type == verbs::cm_event_type::established);
    REQUIRE(next().type == verbs::cm_event_type::established);
  }
  ~connected_pair() {
    for (auto* id : {a2, b2, a, b})
      if (id) {
        v.destroy_qp(id);
        v.destroy_id(id);
      }
    v.destroy_id(listener);
    v.dereg_mr(mr_a);
    v.dereg_mr(mr_b);
    v.destroy_cq(cq_a);
    v.destroy_cq(cq_b);
    v.destroy_comp_channel(cc);
    v.destroy_event_channel(ch);
    v.close_device(dev);
  }
  // The next connection-manager event, waited for: some follow work the NIC carries out later.
  verbs::cm_event<emulated_verbs::cm_id> next() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    auto e = v.get_cm_event(ch);
    while (!e && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      e = v.get_cm_event(ch);
    }
    REQUIRE(e.has_value());
    return *e;
  }
  void post_recv_b(std::uint64_t id, std::size_t offset, std::uint32_t len) {
    v.post_recv(b, {id, {mem_b.data() + offset, len, v.lkey(mr_b)}});
  }
  void send_a(std::uint64_t id, std::size_t offset, std::uint32_t len) {
    v.post_send(a, {id, verbs::send_opcode::send, {mem_a.data() + offset, len, v.lkey(mr_a)}});
  }
  std::vector<verbs::work_completion> poll(emulated_verbs::cq* q) {
    std::vector<verbs::work_completion> out(64);
    out.resize(static_cast<std::size_t>(v.poll_cq(q, out)));
    return out;
  }
  // Polls until `n` completions came (or 5 s passed): what came.
  std::vector<verbs::work_completion> poll_n(emulated_verbs::cq* q, std::size_t n) {
    std::vector<verbs::work_completion> got;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got.size() < n && std::chrono::steady_clock::now() < until) {
      auto more = poll(q);
      if (more.empty()) std::this_thread::sleep_for(std::chrono::microseconds(100));
      got.insert(got.end(), more.begin(), more.end());
    }
    return got;
  }
  // Waits (5 s at most) until the NIC carried out everything posted; whether it did.
  bool settle() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (net->work_in_flight() > 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    return net->work_in_flight() == 0;
  }
};

// Waits (5 s at most) until `net` recorded a violation; the first one, or "".
inline std::string first_violation(fabric& net) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (net.violations().empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  auto v = net.violations();
  return v.empty() ? std::string() : v.front();
}

}  // namespace bps::test::emu
