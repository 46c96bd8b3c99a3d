#pragma once
// Two ipc transports connected on loopback, for transport-level tests (no cluster): `holder`
// receives payloads and holds those that come in place until told, `ring_pair` waits until the
// client's link sends through its ring.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cluster.hpp"

namespace bps::test {

using ipc_tcp = transport::ipc<transport::tcp>;

// Receives payloads for the transport tests below, holding ring payloads in place until told.
struct holder final : transport::receiver, transport::in_place_receiver {
  transport::receiver_capabilities capabilities() override { return {.in_place = this}; }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<std::byte>> got;
  std::vector<bool> in_place;
  std::vector<bool> aligned;  // by payload: where it lay (in place) or was copied to
  std::vector<std::shared_ptr<const void>> held;  // by payload; empty when copied or let go
  std::vector<std::byte> buffer;
  std::atomic<bool> wants_in_place{true};  // false: every payload is copied into `buffer`
  std::string closed;                      // why the link closed, once it did
  bool takes_in_place(const wire::header&) override { return wants_in_place.load(); }
  void on_message_in_place(const wire::header&, std::span<const std::byte> p,
                           std::shared_ptr<const void> keep) override {
    std::lock_guard lock(mu);
    got.emplace_back(p.begin(), p.end());
    in_place.push_back(true);
    aligned.push_back(reinterpret_cast<std::uintptr_t>(p.data()) % 64 == 0);
    held.push_back(std::move(keep));
    cv.notify_all();
  }
  std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
    buffer.resize(h.payload_bytes);
    return buffer;
  }
  void on_message(const wire::header&, std::span<std::byte> p) override {
    std::lock_guard lock(mu);
    got.emplace_back(p.begin(), p.end());
    in_place.push_back(false);
    aligned.push_back(reinterpret_cast<std::uintptr_t>(p.data()) % 64 == 0);
    held.emplace_back();
    cv.notify_all();
  }
  void on_close(const std::string& reason) override {
    std::lock_guard lock(mu);
    closed = reason.empty() ? "closed" : reason;
    cv.notify_all();
  }
  // Waits (10 s at most) for as many payloads as `sent`; true when they are those.
  bool received(const std::vector<std::vector<std::byte>>& sent) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return got.size() >= sent.size(); }) &&
           got == sent;
  }
  bool wait_for(std::size_t count) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return got.size() >= count; });
  }
  // Lets go of payload i's hold, on this (the test's) thread.
  void let_go(std::size_t i) {
    std::shared_ptr<const void> keep;
    {
      std::lock_guard lock(mu);
      keep = std::move(held.at(i));
    }
    REQUIRE(keep);
  }
};

// A connected pair of ipc transports whose client link already sends through its ring.
struct ring_pair {
  // Rings of 32 MiB (BYTEPS_IPC_RING_BYTES), twice the default: a test that fills one sees
  // the option honoured.
  Config c = [] {
    Config c = base_config(1, 1);
    c.ipc_ring_bytes = std::size_t{32} << 20;
    return c;
  }();
  ipc_tcp server_net{c}, client_net{c};
  std::shared_ptr<holder> in = std::make_shared<holder>();
  std::shared_ptr<ipc_tcp::link> accepted;  // the ipc link must live for its handshake
  std::shared_ptr<ipc_tcp::link> client;

  ring_pair() {
    const auto port = server_net.listen("127.0.0.1", 0, [&](std::shared_ptr<ipc_tcp::link> l) {
      accepted = l;
      l->start(in);
    });
    client = client_net.connect("127.0.0.1", port, std::chrono::seconds(5));
    client->start(std::make_shared<holder>());
    const auto ready_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!client->through_shm() && std::chrono::steady_clock::now() < ready_by)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ring_pair() {
    client_net.stop();
    server_net.stop();
  }
};

}  // namespace bps::test
