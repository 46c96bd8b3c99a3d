// transport::ipc at the transport level, two nodes and no cluster: ring payloads a receiver
// holds in place fill the ring and what does not fit goes by TCP; every ring payload starts on a
// cache line, whatever the sizes before it.
#include "cluster.hpp"
#include "ipc_pair.hpp"

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

using test::holder;
using test::ipc_tcp;
using test::ring_pair;

TEST_CASE("ipc transport: payloads a receiver holds in place fill the ring, what does not fit "
          "comes by tcp, and the ring is free once the oldest held one is let go",
          "[ipc]") {
  ring_pair pair;
  // References, not a structured binding: the lambdas below capture them (clang 14 cannot
  // capture a structured binding).
  const Config& c = pair.c;
  auto& in = pair.in;
  auto& client = pair.client;
  REQUIRE(client->through_shm());
  // The ring's size (ipc.hpp, BYTEPS_IPC_RING_BYTES): how many payloads of `bytes` fit in it
  // from its start.
  constexpr std::size_t bytes = std::size_t{4} << 20;
  const std::size_t fit = std::max<std::size_t>(4 * c.max_frame_bytes(), c.ipc_ring_bytes) / bytes;
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
  CHECK(pair.server_net.payloads_in_place() == 2 * fit);
  CHECK(pair.client_net.payloads_through_shm() == 2 * fit);
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

