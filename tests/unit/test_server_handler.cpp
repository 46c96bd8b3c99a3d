#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <byteps/server/sync_sum.hpp>

#include "wire_helpers.hpp"

// The default request handler driven directly, as a server's engine drives it: what each push
// or sum_offer makes the server do (wait, release the round, refuse, answer one worker).

namespace {

using bps::detail::buffer_pool;
using bps::server::outcome;
using kind = bps::server::outcome::kind;

struct sync_driver {
  explicit sync_driver(int workers, bool failover = false) : workers(workers), failover(failover) {}

  // Worker `worker` sends `v` as round `round` of tensor 'grad' (key 42, partition 0).
  outcome send(bps::wire::msg type, int worker, std::uint64_t round, std::vector<float> v) {
    auto h = bps_test::grad_frame(type, round, v.size() * sizeof(float),
                                  static_cast<std::uint32_t>(worker));
    auto b = bps_test::pooled_floats(pool, v);
    h.payload_bytes = b.size;
    auto o = handler.handle(bps::server::request{h, bps::server::push_bytes::in(b), worker, workers, failover, name});
    pool.give_back(std::move(b));
    return o;
  }
  outcome push(int worker, std::uint64_t round, std::vector<float> v) {
    return send(bps::wire::msg::push, worker, round, std::move(v));
  }

  // Bytes the handler answered with, as floats.
  static std::vector<float> floats(const outcome& o) { return bps_test::as_floats(o.answer.bytes); }

  int workers;
  bool failover;
  buffer_pool pool;
  bps::server::sync_sum handler{bps::Config{}, pool};
  std::function<std::string()> name = [] { return std::string("'grad'"); };
};

}  // namespace

static_assert(bps::ServerHandler<bps::server::sync_sum>);
static_assert(!bps::ServerHandler<int>);

namespace {
struct no_handle {
  no_handle(const bps::Config&, buffer_pool&) {}
};
struct wrong_result {
  wrong_result(const bps::Config&, buffer_pool&) {}
  int handle(const bps::server::request&) { return 0; }
};
struct no_constructor {
  outcome handle(const bps::server::request&) { return outcome::taken(); }
};
}  // namespace
static_assert(!bps::ServerHandler<no_handle>);
static_assert(!bps::ServerHandler<wrong_result>);
static_assert(!bps::ServerHandler<no_constructor>);

TEST_CASE("sync_sum answers a round of 3 workers with the exact sum", "[server][handler]") {
  sync_driver d(3);
  for (std::uint64_t round = 0; round < 3; ++round) {
    CAPTURE(round);
    CHECK(d.push(1, round, {1.0f, 2.0f, 3.0f}).what == kind::wait);
    CHECK(d.push(0, round, {10.0f, 20.0f, 30.0f}).what == kind::wait);
    const auto o = d.push(2, round, {100.0f, 200.0f, static_cast<float>(round)});
    REQUIRE(o.what == kind::release);
    CHECK(sync_driver::floats(o) ==
          std::vector<float>{111.0f, 222.0f, 33.0f + static_cast<float>(round)});
    CHECK(o.answer.round == round);
    CHECK(o.answer.type == bps::dtype::float32);
    CHECK(o.answer.tensor_bytes == 12);
    CHECK(o.answer.offset == 0);
    CHECK_FALSE(o.answer.keep);  // the key's double buffer keeps the bytes
  }
}

TEST_CASE("sync_sum keeps round r's sum while round r+1 is summed", "[server][handler]") {
  sync_driver d(2);
  REQUIRE(d.push(0, 0, {1.0f}).what == kind::wait);
  const auto first = d.push(1, 0, {2.0f});
  REQUIRE(first.what == kind::release);
  REQUIRE(d.push(0, 1, {5.0f}).what == kind::wait);
  const auto second = d.push(1, 1, {6.0f});
  REQUIRE(second.what == kind::release);
  // Round 0's answer may still be going out while round 1 is summed: its bytes did not change.
  CHECK(sync_driver::floats(first) == std::vector<float>{3.0f});
  CHECK(sync_driver::floats(second) == std::vector<float>{11.0f});
}

TEST_CASE("sync_sum refuses a wrong-size push with a message naming the tensor",
          "[server][handler]") {
  sync_driver d(2);
  const auto h = bps_test::grad_frame(bps::wire::msg::push, 0, 6);
  auto b = d.pool.take(6);  // one and a half floats
  std::memset(b.data.get(), 0, 6);
  const auto o = d.handler.handle(bps::server::request{h, bps::server::push_bytes::in(b), 0, 2, false, d.name});
  REQUIRE(o.what == kind::refuse);
  CHECK(o.error.find("'grad'") != std::string::npos);
  CHECK(o.error.find("not a whole number of float32") != std::string::npos);
}

TEST_CASE("sync_sum fails the whole round when workers push different shapes",
          "[server][handler]") {
  sync_driver d(2);
  REQUIRE(d.push(0, 0, {1.0f, 2.0f}).what == kind::wait);
  const auto o = d.push(1, 0, {1.0f, 2.0f, 3.0f});
  REQUIRE(o.what == kind::fail_round);
  CHECK(o.error.find("'grad' has different shapes") != std::string::npos);
  CHECK(o.error.find("worker 0 pushed 2 x float32") != std::string::npos);
  CHECK(o.error.find("worker 1 pushed 3 x float32") != std::string::npos);
  // The next round starts clean.
  REQUIRE(d.push(0, 1, {1.0f, 2.0f}).what == kind::wait);
  CHECK(sync_driver::floats(d.push(1, 1, {3.0f, 4.0f})) == std::vector<float>{4.0f, 6.0f});
}

TEST_CASE("sync_sum refuses a second push of one round and a push of another round",
          "[server][handler]") {
  sync_driver d(2);
  REQUIRE(d.push(0, 0, {1.0f}).what == kind::wait);
  const auto twice = d.push(0, 0, {1.0f});
  REQUIRE(twice.what == kind::refuse);
  CHECK(twice.error.find("worker 0 pushed 'grad' partition 0 twice in round 0") !=
        std::string::npos);
  const auto ahead = d.push(1, 3, {1.0f});
  REQUIRE(ahead.what == kind::refuse);
  CHECK(ahead.error.find("pushed round 3") != std::string::npos);
  // Neither refusal counted: worker 1's push of round 0 completes the round.
  CHECK(sync_driver::floats(d.push(1, 0, {2.0f})) == std::vector<float>{3.0f});
}

TEST_CASE("sync_sum with failover answers a re-push of the previous round at once",
          "[server][handler][failover]") {
  sync_driver d(2, true);
  REQUIRE(d.push(0, 5, {1.0f}).what == kind::wait);  // a replacement adopts round 5
  REQUIRE(d.push(1, 5, {2.0f}).what == kind::release);
  // Worker 1 never got round 5's answer from the server that died; it re-pushes it.
  const auto o = d.push(1, 5, {2.0f});
  REQUIRE(o.what == kind::answer_now);
  CHECK(o.answer.round == 5);
  CHECK(sync_driver::floats(o) == std::vector<float>{3.0f});
}

TEST_CASE("sync_sum with failover takes sum offers and releases a round with one",
          "[server][handler][failover]") {
  sync_driver d(2, true);
  // Worker 0 got round 4's sum from the dead server; worker 1 did not and re-pushes round 4.
  CHECK(d.send(bps::wire::msg::sum_offer, 1, 3, {7.0f}).what == kind::taken);
  REQUIRE(d.push(1, 4, {99.0f}).what == kind::wait);
  const auto o = d.send(bps::wire::msg::sum_offer, 0, 4, {10.0f});
  REQUIRE(o.what == kind::release);  // the server answers the waiting worker 1 only
  CHECK(o.answer.round == 4);
  CHECK(sync_driver::floats(o) == std::vector<float>{10.0f});  // the offer wins over the re-push
  const auto far = d.send(bps::wire::msg::sum_offer, 0, 9, {1.0f});
  REQUIRE(far.what == kind::refuse);
  CHECK(far.error.find("'grad'") != std::string::npos);
}
