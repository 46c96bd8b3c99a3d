// transport::ipc at the transport level, two nodes and no cluster: ring payloads a receiver
// holds in place fill the ring and what does not fit goes by TCP; every ring payload starts on a
// cache line, whatever the sizes before it.
#include "cluster.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
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

using namespace bps;

namespace {

using ipc_tcp = transport::ipc<transport::tcp>;

// Receives payloads for the transport tests below, holding ring payloads in place until told.
struct holder final : transport::receiver {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<std::byte>> got;
  std::vector<bool> in_place;
  std::vector<bool> aligned;  // by payload: where it lay (in place) or was copied to
  std::vector<std::shared_ptr<const void>> held;  // by payload; empty when copied or let go
  std::vector<std::byte> buffer;
  bool takes_in_place(const wire::header&) override { return true; }
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
  void on_close(const std::string&) override {}
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
  Config c = test::base_config(1, 1);
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

}  // namespace

TEST_CASE("ipc transport: payloads a receiver holds in place fill the ring, what does not fit "
          "comes by tcp, and the ring is free once the oldest held one is let go",
          "[ipc]") {
  ring_pair pair;
  auto& [c, server_net, client_net, in, accepted, client] = pair;
  REQUIRE(client->through_shm());
  // The ring's size (ipc.hpp): how many payloads of `bytes` fit in it from its start.
  constexpr std::size_t bytes = std::size_t{4} << 20;
  const std::size_t fit = std::max<std::size_t>(4 * c.max_frame_bytes(), 16u << 20) / bytes;
  REQUIRE(fit >= 2);

  std::vector<std::vector<std::byte>> sent;
  auto send = [&](std::size_t count) {
    for (std::size_t k = 0; k < count; ++k) {
      sent.emplace_back(bytes);
      const auto i = sent.size();
      for (std::size_t j = 0; j < bytes; ++j) sent.back()[j] = static_cast<std::byte>(i * 31 + j);
      wire::header h;
      h.type = wire::msg::push;
      client->send(h, sent.back(), {});
    }
    REQUIRE(in->wait_for(sent.size()));
  };
  auto ways = [&] {
    std::lock_guard lock(in->mu);
    return in->in_place;
  };
  sent.reserve(3 * fit + 2);  // the transport reads them until on_sent: they must not move

  // Held, the first `fit` fill the ring; the next two come by tcp.
  send(fit + 2);
  std::vector<bool> expect(fit, true);
  expect.insert(expect.end(), {false, false});
  CHECK(ways() == expect);
  // Every one but the oldest let go, newest first: the ring's space is still in use behind the
  // oldest, so the next one comes by tcp too.
  for (std::size_t i = fit; i-- > 1;) in->let_go(i);
  send(1);
  expect.push_back(false);
  CHECK(ways() == expect);
  // The oldest let go: the whole ring is free again; `fit` more take it.
  in->let_go(0);
  send(fit);
  expect.insert(expect.end(), fit, true);
  CHECK(ways() == expect);
  {
    std::lock_guard lock(in->mu);
    CHECK(in->got == sent);  // in place or copied, each payload's own bytes
  }
  CHECK(server_net.payloads_in_place() == 2 * fit);
  CHECK(client_net.payloads_through_shm() == 2 * fit);
}

TEST_CASE("ipc transport: ring payloads of odd sizes each start on a cache line, so a receiver "
          "reads every dtype in place at its alignment",
          "[ipc]") {
  ring_pair pair;
  REQUIRE(pair.client->through_shm());
  // Odd sizes move the ring's head off any alignment unless the sender rounds it up.
  const std::vector<std::size_t> sizes = {16385, 16387, 20001, 65539, 16389, 100003, 16391};
  std::vector<std::vector<std::byte>> sent;
  sent.reserve(sizes.size());  // the transport reads them until on_sent: they must not move
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    sent.emplace_back(sizes[k]);
    for (std::size_t j = 0; j < sizes[k]; ++j) sent.back()[j] = static_cast<std::byte>(k * 7 + j);
    wire::header h;
    h.type = wire::msg::push;
    pair.client->send(h, sent.back(), {});
  }
  REQUIRE(pair.in->wait_for(sizes.size()));
  std::lock_guard lock(pair.in->mu);
  CHECK(pair.in->in_place == std::vector<bool>(sizes.size(), true));
  CHECK(pair.in->aligned == std::vector<bool>(sizes.size(), true));
  CHECK(pair.in->got == sent);
}

