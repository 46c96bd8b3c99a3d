#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <byteps/server/key_state.hpp>

#include "wire_helpers.hpp"

// The server's per-partition state, failover mode in particular: rounds adopted from the first
// frame, sums in worker-rank order, sum offers from workers that already hold a round's sum.

namespace {

using state = bps::server::key_state;
using bps::detail::buffer_pool;
using bps_test::as_floats;
using bps_test::grad_frame;
using bps_test::pooled_floats;

std::string contains_nothing() { return "'t'"; }

// Pushes `v` for `worker`; returns accept's message.
std::string push(state& k, buffer_pool& pool, int worker, std::uint64_t round,
                 std::vector<float> v, int workers) {
  auto b = pooled_floats(pool, v);
  auto msg = k.accept(grad_frame(bps::wire::msg::push, round, v.size() * sizeof(float)), b, worker,
                      workers, contains_nothing);
  pool.give_back(std::move(b));
  return msg;
}

std::string offer(state& k, buffer_pool& pool, int worker, std::uint64_t round,
                  std::vector<float> v, int workers, bool& completes) {
  auto b = pooled_floats(pool, v);
  auto msg = k.offer(grad_frame(bps::wire::msg::sum_offer, round, v.size() * sizeof(float)), b,
                     worker, workers, completes, contains_nothing);
  pool.give_back(std::move(b));
  return msg;
}

}  // namespace

TEST_CASE("key_state without failover refuses a round other than its own", "[server][key_state]") {
  buffer_pool pool;
  state k(pool, false);
  const auto msg = push(k, pool, 0, 3, {1.0f}, 2);
  CHECK(msg.find("pushed round 3") != std::string::npos);
  CHECK(msg.find("at round 0") != std::string::npos);
}

TEST_CASE("key_state with failover sums in worker-rank order whatever the arrival order",
          "[server][key_state][failover]") {
  // In float, (1e8 + 1) - 1e8 is 0 but (1e8 - 1e8) + 1 is 1: the order shows in the bits.
  const std::vector<std::vector<float>> x = {{1e8f}, {1.0f}, {-1e8f}};
  const float rank_order = (x[0][0] + x[1][0]) + x[2][0];
  for (const auto& order : std::vector<std::vector<int>>{{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}}) {
    CAPTURE(order);
    buffer_pool pool;
    state k(pool, true);
    for (int w : order) REQUIRE(push(k, pool, w, 0, x[static_cast<std::size_t>(w)], 3).empty());
    const auto sum = as_floats(k.finish_round());
    CHECK(sum[0] == rank_order);
    k.next_round();
    CHECK(k.round == 1);
  }
}

TEST_CASE("key_state with failover adopts the round of the first push", "[server][key_state][failover]") {
  buffer_pool pool;
  state k(pool, true);
  REQUIRE(push(k, pool, 1, 7, {2.0f, 3.0f}, 2).empty());
  CHECK(k.round == 7);
  CHECK(k.shaped);
  REQUIRE(push(k, pool, 0, 7, {1.0f, 1.0f}, 2).empty());
  CHECK(as_floats(k.finish_round()) == std::vector<float>{3.0f, 4.0f});
  k.next_round();
  // The next round is pushed as usual; a re-push of round 7 gets round 7's sum.
  REQUIRE(k.previous_sum(7));
  CHECK(as_floats(*k.previous_sum(7)) == std::vector<float>{3.0f, 4.0f});
  CHECK_FALSE(k.previous_sum(6));
  CHECK_FALSE(k.previous_sum(8));
  CHECK(push(k, pool, 0, 9, {1.0f, 1.0f}, 2).find("pushed round 9") != std::string::npos);
}

TEST_CASE("key_state offers: the previous round kept, the current round completed",
          "[server][key_state][failover]") {
  buffer_pool pool;
  bool completes = false;

  SECTION("an offer on an empty key sets the round after it and keeps the sum") {
    state k(pool, true);
    REQUIRE(offer(k, pool, 0, 4, {10.0f}, 2, completes).empty());
    CHECK_FALSE(completes);
    CHECK(k.round == 5);
    REQUIRE(k.previous_sum(4));
    CHECK(as_floats(*k.previous_sum(4)) == std::vector<float>{10.0f});
    // The lagging worker's own offer (one round older) changes nothing.
    REQUIRE(offer(k, pool, 1, 3, {7.0f}, 2, completes).empty());
    CHECK_FALSE(completes);
    CHECK(k.round == 5);
    CHECK(as_floats(*k.previous_sum(4)) == std::vector<float>{10.0f});
  }

  SECTION("an offer of the round being summed completes it with the offered bytes") {
    state k(pool, true);
    REQUIRE(offer(k, pool, 1, 3, {7.0f}, 2, completes).empty());  // the lagging worker's
    CHECK(k.round == 4);
    REQUIRE(push(k, pool, 1, 4, {99.0f}, 2).empty());  // its re-push of round 4
    REQUIRE(offer(k, pool, 0, 4, {10.0f}, 2, completes).empty());  // the worker that had it
    CHECK(completes);
    CHECK(as_floats(k.finish_round()) == std::vector<float>{10.0f});  // not 99: the offer wins
    CHECK(k.pushed() == 1);
    k.next_round();
    CHECK(k.round == 5);
    REQUIRE(push(k, pool, 1, 5, {1.0f}, 2).empty());
    REQUIRE(push(k, pool, 0, 5, {2.0f}, 2).empty());
    CHECK(as_floats(k.finish_round()) == std::vector<float>{3.0f});
  }

  SECTION("an offer of a round nobody can have yet is refused") {
    state k(pool, true);
    REQUIRE(push(k, pool, 0, 2, {1.0f}, 2).empty());
    const auto msg = offer(k, pool, 1, 3, {1.0f}, 2, completes);
    CHECK(msg.find("offered the sum of round 3") != std::string::npos);
    CHECK_FALSE(completes);
  }

  SECTION("an offer with another shape is refused") {
    state k(pool, true);
    REQUIRE(push(k, pool, 0, 2, {1.0f}, 2).empty());
    const auto msg = offer(k, pool, 1, 2, {1.0f, 2.0f}, 2, completes);
    CHECK(msg.find("another shape") != std::string::npos);
  }
}

TEST_CASE("key_state offers of fp16 keep the bytes as offered", "[server][key_state][failover]") {
  buffer_pool pool;
  state k(pool, true);
  auto h = grad_frame(bps::wire::msg::sum_offer, 0, 4);  // two halves
  h.dtype = static_cast<std::uint32_t>(bps::dtype::float16);
  auto b = pool.take(4);
  const std::byte bytes[4] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  std::memcpy(b.data.get(), bytes, 4);
  bool completes = false;
  REQUIRE(k.offer(h, b, 0, 2, completes, contains_nothing).empty());
  REQUIRE(k.previous_sum(0));
  CHECK(std::memcmp(k.previous_sum(0)->data(), bytes, 4) == 0);
  pool.give_back(std::move(b));
}

// Elastic mode (docs/plans/issue-39-elastic.md): a worker removed mid-round. The round starts
// again under its number; members whose push was in push it again, each counted once.

TEST_CASE("elastic round: a restart discards the round's pushes, and each member's re-push "
          "counts once - whole pushes, arrival and rank order",
          "[server][key_state][elastic]") {
  const std::vector<std::vector<float>> x = {{1.0f, 2.0f}, {10.0f, 20.0f}, {100.0f, 200.0f}};
  const std::vector<bool> without_2 = {true, true, false};
  for (const bool rank_order : {false, true}) {
    CAPTURE(rank_order);
    buffer_pool pool;
    state k(pool, rank_order);
    REQUIRE(push(k, pool, 0, 0, x[0], 3).empty());
    REQUIRE(push(k, pool, 2, 0, x[2], 3).empty());
    CHECK(k.restart_round(without_2) == std::vector<int>{0});  // worker 0 must push again
    CHECK(k.round == 0);
    CHECK(k.pushed() == 0);
    CHECK_FALSE(k.complete());
    // The removed worker's pushes are refused, naming why.
    const auto late = push(k, pool, 2, 0, x[2], 3);
    CHECK(late.find("worker 2") != std::string::npos);
    CHECK(late.find("no longer a member") != std::string::npos);
    REQUIRE(push(k, pool, 1, 0, x[1], 3).empty());
    CHECK_FALSE(k.complete());
    REQUIRE(push(k, pool, 0, 0, x[0], 3).empty());  // the re-push
    CHECK(push(k, pool, 0, 0, x[0], 3).find("twice") != std::string::npos);
    REQUIRE(k.complete());
    CHECK(as_floats(k.finish_round()) == std::vector<float>{11.0f, 22.0f});
    k.next_round();
    CHECK(k.round == 1);
    // The next round needs the two members only.
    REQUIRE(push(k, pool, 1, 1, x[1], 3).empty());
    REQUIRE(push(k, pool, 0, 1, x[0], 3).empty());
    REQUIRE(k.complete());
    CHECK(as_floats(k.finish_round()) == std::vector<float>{11.0f, 22.0f});
  }
}

TEST_CASE("elastic round: two restarts in a row, and a restart before the first push",
          "[server][key_state][elastic]") {
  const std::vector<std::vector<float>> x = {{1.0f}, {10.0f}, {100.0f}};
  for (const bool rank_order : {false, true}) {
    CAPTURE(rank_order);
    buffer_pool pool;
    state k(pool, rank_order);
    REQUIRE(push(k, pool, 1, 0, x[1], 3).empty());
    REQUIRE(push(k, pool, 0, 0, x[0], 3).empty());
    CHECK(k.restart_round({true, true, false}) == std::vector<int>{0, 1});
    REQUIRE(push(k, pool, 0, 0, x[0], 3).empty());  // 0's re-push is in, 1's not yet
    CHECK(k.restart_round({true, false, false}) == std::vector<int>{0});
    REQUIRE(push(k, pool, 0, 0, x[0], 3).empty());  // its second re-push, the only member
    REQUIRE(k.complete());
    CHECK(as_floats(k.finish_round()) == std::vector<float>{1.0f});

    // Worker 0 removed before any push: rank order starts at worker 1.
    buffer_pool pool2;
    state k2(pool2, rank_order);
    CHECK(k2.restart_round({false, true, true}).empty());
    REQUIRE(push(k2, pool2, 2, 0, x[2], 3).empty());
    CHECK_FALSE(k2.complete());
    REQUIRE(push(k2, pool2, 1, 0, x[1], 3).empty());
    REQUIRE(k2.complete());
    CHECK(as_floats(k2.finish_round()) == std::vector<float>{110.0f});
  }
}

TEST_CASE("elastic round: in rank order a held push of a removed worker goes, the members' sum "
          "keeps its order",
          "[server][key_state][elastic]") {
  // In float, (1e8 + 1) - 1e8 is 0 but (1e8 - 1e8) + 1 is 1: the order shows in the bits.
  const std::vector<std::vector<float>> x = {{5.0f}, {1e8f}, {1.0f}, {-1e8f}};
  buffer_pool pool;
  state k(pool, true);
  REQUIRE(push(k, pool, 3, 0, x[3], 4).empty());  // held: lower ranks are not in
  REQUIRE(push(k, pool, 1, 0, x[1], 4).empty());
  CHECK(k.restart_round({false, true, true, true}) == std::vector<int>{1, 3});
  for (int w : {3, 2, 1}) REQUIRE(push(k, pool, w, 0, x[static_cast<std::size_t>(w)], 4).empty());
  REQUIRE(k.complete());
  CHECK(as_floats(k.finish_round())[0] == (x[1][0] + x[2][0]) + x[3][0]);
}

TEST_CASE("elastic round: a cut-through round restarts after a piece went out, and its pieces "
          "then sum the members alone",
          "[server][key_state][elastic]") {
  // 4 floats a push, in chunks of 2: the first chunk goes out once every worker's bytes cover it.
  const std::vector<std::vector<float>> x = {
      {1.0f, 2.0f, 3.0f, 4.0f}, {10.0f, 20.0f, 30.0f, 40.0f}, {100.0f, 200.0f, 300.0f, 400.0f}};
  constexpr std::size_t bytes = 4 * sizeof(float);
  buffer_pool pool;
  state k(pool, false, 2 * sizeof(float));
  std::vector<std::shared_ptr<std::vector<float>>> held;
  auto start = [&](int w) {
    const auto i = static_cast<std::size_t>(w);
    auto data = std::make_shared<std::vector<float>>(x[i]);
    held.push_back(data);
    const auto h = grad_frame(bps::wire::msg::push, 0, bytes, static_cast<std::uint32_t>(w));
    REQUIRE(k.admit(h, bytes, w, 3, contains_nothing, true).empty());
    k.take_input(w, {std::as_bytes(std::span(*data)), data});
    return data.get();
  };
  for (int w : {0, 1}) {
    start(w);
    CHECK(k.arrived(w, bytes, true).second == 0);  // worker 2 has not pushed yet
  }
  const void* owner_of_2 = start(2);
  const auto piece = k.arrived(2, 2 * sizeof(float), false);
  CHECK(piece == std::pair<std::size_t, std::size_t>{0, 2 * sizeof(float)});
  CHECK(as_floats(k.sum_buffer().first(8)) == std::vector<float>{111.0f, 222.0f});

  CHECK(k.restart_round({true, true, false}) == std::vector<int>{0, 1});
  CHECK(k.answered_bytes() == 0);
  CHECK_FALSE(k.is_input(2, owner_of_2));  // the rest of its frame is ignored
  start(1);
  CHECK(k.arrived(1, bytes, true).second == 0);
  start(0);
  const auto whole = k.arrived(0, bytes, true);
  CHECK(whole == std::pair<std::size_t, std::size_t>{0, bytes});
  REQUIRE(k.complete());
  CHECK(as_floats(k.sum_buffer().first(bytes)) == std::vector<float>{11.0f, 22.0f, 33.0f, 44.0f});
}

TEST_CASE("elastic round: a broadcast round none of whose pushes holds data fails by name - "
          "with the root's push in it is summed",
          "[server][key_state][elastic]") {
  buffer_pool pool;
  state k(pool, false);
  auto push_zeros = [&](int worker, std::uint64_t round) {
    auto b = pooled_floats(pool, {-0.0f});
    auto h = grad_frame(bps::wire::msg::push, round, sizeof(float));
    h.flags |= bps::wire::flag_no_data;
    auto msg = k.accept(h, b, worker, 3, contains_nothing);
    pool.give_back(std::move(b));
    return msg;
  };
  // Round 0: the root (worker 2) pushes its data, the others zeros.
  REQUIRE(push_zeros(0, 0).empty());
  REQUIRE(push(k, pool, 2, 0, {5.0f}, 3).empty());
  REQUIRE(push_zeros(1, 0).empty());
  REQUIRE(k.complete());
  CHECK(k.round_error.empty());
  CHECK(as_floats(k.finish_round()) == std::vector<float>{5.0f});
  k.next_round();
  // Round 1: the root's push is in, then its machine is removed; the re-pushes are zeros.
  REQUIRE(push_zeros(0, 1).empty());
  REQUIRE(push(k, pool, 2, 1, {6.0f}, 3).empty());
  CHECK(k.restart_round({true, true, false}) == std::vector<int>{0});
  REQUIRE(push_zeros(1, 1).empty());
  CHECK(k.round_error.empty());  // not every member pushed yet
  REQUIRE(push_zeros(0, 1).empty());
  REQUIRE(k.complete());
  CHECK(k.round_error.find("holds the broadcast's data") != std::string::npos);
  CHECK(k.round_error.find("its root's machine was removed") != std::string::npos);
  k.next_round();
  // Round 2, from a live root: summed.
  REQUIRE(push(k, pool, 1, 2, {7.0f}, 3).empty());
  REQUIRE(push_zeros(0, 2).empty());
  REQUIRE(k.complete());
  CHECK(k.round_error.empty());
  CHECK(as_floats(k.finish_round()) == std::vector<float>{7.0f});
}
