#include <byteps/server/async_sum.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "wire_helpers.hpp"

// server::async_sum with failover on, driven as a replacement server is: each worker offers
// its last answer (the parameters with every worker's count of deltas they hold) and re-pushes
// the delta in flight, in any interleaving across workers. Whatever the order, the parameters
// end as the seed plus every delta exactly once (int32, so exactly), and each answer carries
// the counts that the next replacement would need.

// A named namespace, not an anonymous one: the sanitizer builds compile test files in unity
// batches, where another file's helpers (test_async_sum.cpp's `values`) would collide.
namespace async_failover_test {

using bps::dtype;
using bps::detail::buffer_pool;
using bps::server::outcome;
using kind = bps::server::outcome::kind;
using bps_test::contains;

constexpr int workers = 3;
constexpr std::size_t n = 5;  // int32 elements of 'grad'

using values = std::vector<std::int32_t>;
using counts = std::vector<std::uint64_t>;

values seed() {
  return {10, -20, 30, -40, 50};
}
values delta(int worker, std::uint64_t round) {
  values v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::int32_t>((worker + 1) * 1000 + static_cast<int>(round) * 10 +
                                     static_cast<int>(i));
  return v;
}
// The seed plus worker w's rounds 1..c[w], for every w.
values holding(const counts& c) {
  values v = seed();
  for (int w = 0; w < workers; ++w)
    for (std::uint64_t r = 1; r <= c[static_cast<std::size_t>(w)]; ++r)
      for (std::size_t i = 0; i < n; ++i) v[i] += delta(w, r)[i];
  return v;
}

struct replacement {
  replacement() : handler(config(), pool) {}
  static bps::Config config() {
    bps::Config c;
    c.enable_async = true;
    c.failover_timeout = std::chrono::milliseconds(1000);
    return c;
  }

  outcome send(bps::wire::msg type, int worker, std::uint64_t round, const values& v,
               const counts* c = nullptr) {
    const std::size_t bytes = n * sizeof(std::int32_t), extra = c ? 8 * c->size() : 0;
    auto h = bps_test::grad_frame(type, round, bytes, static_cast<std::uint32_t>(worker));
    h.dtype = static_cast<std::uint32_t>(dtype::int32);
    h.payload_bytes = bytes + extra;
    if (c) h.flags = bps::wire::flag_applied;
    auto b = pool.take(bytes + extra);
    std::memcpy(b.data.get(), v.data(), bytes);
    for (std::size_t w = 0; c && w < c->size(); ++w)
      bps::wire::detail::put_le<std::uint64_t>(b.data.get() + bytes + 8 * w, (*c)[w]);
    auto o = handler.handle(bps::server::request{h, bps::server::push_bytes::in(b), worker, workers, true, name});
    pool.give_back(std::move(b));
    return o;
  }
  outcome push(int worker, std::uint64_t round) {
    return send(bps::wire::msg::push, worker, round, round == 0 ? seed() : delta(worker, round));
  }
  outcome offer(int worker, const counts& c) {
    return send(bps::wire::msg::sum_offer, worker, c[static_cast<std::size_t>(worker)], holding(c),
                &c);
  }

  buffer_pool pool;
  bps::server::async_sum handler;
  std::function<std::string()> name = [] { return std::string("'grad'"); };
};

values params_of(const bps::server::reply& r) {
  values v(n);
  std::memcpy(v.data(), r.bytes.data(), n * sizeof(std::int32_t));
  return v;
}
counts counts_of(const bps::server::reply& r) {
  REQUIRE(r.applied_counts);
  REQUIRE(r.bytes.size() == n * sizeof(std::int32_t) + 8 * workers);
  counts c(workers);
  for (std::size_t w = 0; w < c.size(); ++w)
    c[w] = bps::wire::detail::get_le<std::uint64_t>(r.bytes.data() + n * 4 + 8 * w);
  return c;
}

TEST_CASE("async failover: answers carry each worker's count of applied deltas",
          "[server][handler][async][failover]") {
  replacement s;  // a server from the start: round 0 of everyone, then deltas
  REQUIRE(s.push(0, 0).what == kind::wait);  // answers wait until every worker was heard from
  REQUIRE(s.push(1, 0).what == kind::wait);
  auto o = s.push(2, 0);  // the last: answered, and the two held with it
  REQUIRE(o.what == kind::release_each);
  CHECK(params_of(o.answer) == seed());
  CHECK(counts_of(o.answer) == counts{0, 0, 0});
  REQUIRE(o.released.size() == 2);
  for (int w = 0; w < 2; ++w) {
    CHECK(o.released[static_cast<std::size_t>(w)].worker == w);
    CHECK(o.released[static_cast<std::size_t>(w)].answer.round == 0);
    CHECK(params_of(o.released[static_cast<std::size_t>(w)].answer) == seed());
  }
  REQUIRE(s.push(1, 1).what == kind::answer_now);
  o = s.push(0, 1);
  REQUIRE(o.what == kind::answer_now);
  CHECK(params_of(o.answer) == holding({1, 1, 0}));
  CHECK(counts_of(o.answer) == counts{1, 1, 0});
  CHECK(o.answer.round == 1);
}

TEST_CASE(
    "async failover: the newest offer wins and each re-pushed delta counts once, in any "
    "order",
    "[server][handler][async][failover]") {
  // The dead server applied: the seed, w0 r1, w1 r1, w2 r1, w1 r2, w0 r2, and died. Last
  // answers: w0 after its r2 {2,2,1}; w1 after its r1 {1,1,0} (its r2 was applied but the
  // answer was lost, so it re-pushes r2); w2 after its r1 {1,1,1}.
  replacement s;
  REQUIRE(s.offer(1, {1, 1, 0}).what == kind::taken);  // seeds the replacement
  REQUIRE(s.push(1, 2).what == kind::wait);  // not in that offer: applied; answered later
  CHECK(s.handler.version(bps_test::grad_key, 0) == 3u);
  REQUIRE(s.offer(2, {1, 1, 1}).what == kind::taken);  // newer: w1's r2 kept on top
  REQUIRE(s.push(2, 2).what == kind::wait);            // w2's next delta, new to everyone
  auto o = s.offer(0, {2, 2, 1});  // newest: it holds w1's r2 already; everyone heard from
  REQUIRE(o.what == kind::release_each);
  REQUIRE(o.released.size() == 2);
  for (int w = 1; w <= 2; ++w) {
    const auto& a = o.released[static_cast<std::size_t>(w - 1)];
    CHECK(a.worker == w);
    CHECK(a.answer.round == 2);
    CHECK(params_of(a.answer) == holding({2, 2, 2}));  // w1's r2 once, w2's r2 on top
    CHECK(counts_of(a.answer) == counts{2, 2, 2});
  }
  o = s.push(0, 3);
  REQUIRE(o.what == kind::answer_now);
  CHECK(params_of(o.answer) == holding({3, 2, 2}));  // w1's r2 once, w2's r2 kept
  CHECK(counts_of(o.answer) == counts{3, 2, 2});
  CHECK(s.handler.version(bps_test::grad_key, 0) == 7u);
  // Every worker was heard from: later deltas simply add.
  o = s.push(1, 3);
  CHECK(params_of(o.answer) == holding({3, 3, 2}));
  CHECK(counts_of(o.answer) == counts{3, 3, 2});
}

TEST_CASE("async failover: a re-pushed delta the newest offer holds is answered, not added",
          "[server][handler][async][failover]") {
  replacement s;
  REQUIRE(s.offer(0, {2, 2, 1}).what == kind::taken);
  REQUIRE(s.push(1, 2).what == kind::wait);  // the dead server had applied it: w0's offer holds it
  CHECK(s.handler.version(bps_test::grad_key, 0) == 5u);
  auto o = s.offer(2, {1, 1, 1});  // older: ignored; everyone heard from
  REQUIRE(o.what == kind::release_each);
  REQUIRE(o.released.size() == 1);
  CHECK(o.released[0].worker == 1);
  CHECK(o.released[0].answer.round == 2);
  CHECK(params_of(o.released[0].answer) == holding({2, 2, 1}));
  CHECK(s.handler.version(bps_test::grad_key, 0) == 5u);
  o = s.push(1, 3);
  CHECK(params_of(o.answer) == holding({2, 3, 1}));
}

TEST_CASE("async failover: workers that waited for the seed get the offered parameters",
          "[server][handler][async][failover]") {
  replacement s;
  REQUIRE(s.push(2, 0).what == kind::wait);  // its round 0 was never answered; no seed here
  REQUIRE(s.offer(1, {1, 1, 0}).what == kind::taken);  // the seed; worker 0 not heard from yet
  // Rank 0's re-pushed round 0 is answered with the parameters, not taken as a new seed, and
  // worker 2's round 0 with it.
  auto o = s.push(0, 0);
  REQUIRE(o.what == kind::release_each);
  CHECK(o.answer.round == 0);
  CHECK(params_of(o.answer) == holding({1, 1, 0}));
  REQUIRE(o.released.size() == 1);
  CHECK(o.released[0].worker == 2);
  CHECK(o.released[0].answer.round == 0);
  CHECK(params_of(o.released[0].answer) == holding({1, 1, 0}));
}

TEST_CASE("async failover: malformed offers and pushes are refused, naming the worker",
          "[server][handler][async][failover]") {
  replacement s;
  auto o = s.push(1, 3);  // a delta with no parameters to add it to
  REQUIRE(o.what == kind::refuse);
  CHECK(contains(o.error, "worker 1 pushed round 3 of 'grad' partition 0 as its first push"));
  CHECK(contains(o.error, "no parameters came yet"));
  REQUIRE(s.offer(1, {1, 1, 0}).what == kind::taken);
  o = s.push(1, 3);  // skips round 2
  REQUIRE(o.what == kind::refuse);
  CHECK(contains(o.error, "the parameters hold its rounds up to 1 only"));
  o = s.send(bps::wire::msg::sum_offer, 2, 1, holding({1, 1, 1}));  // no counts
  REQUIRE(o.what == kind::refuse);
  CHECK(contains(o.error, "without the 24 bytes of applied counts"));
  const counts wrong{1, 1, 4};
  o = s.send(bps::wire::msg::sum_offer, 2, 1, holding({1, 1, 1}), &wrong);
  REQUIRE(o.what == kind::refuse);
  CHECK(contains(o.error, "is of round 1, but its counts say the parameters hold 4"));
  REQUIRE(s.push(1, 2).what == kind::wait);  // workers 0 and 2 not heard from
  o = s.offer(1, {1, 1, 0});
  REQUIRE(o.what == kind::refuse);
  CHECK(contains(o.error, "worker 1 offered 'grad' partition 0 after it pushed it here"));
}

TEST_CASE(
    "async failover: a replacement answers nobody until every worker was heard from, so no "
    "answer of its own lacks a delta another worker was answered for",
    "[server][handler][async][failover]") {
  // The dead server applied the seed and round 1 of w0, w1, w2, answering each: last answers
  // w0 {1,0,0}, w1 {1,1,0}, w2 {1,1,1}. Replacement 1 hears w1 only, then dies too.
  replacement first;
  REQUIRE(first.offer(1, {1, 1, 0}).what == kind::taken);
  // Answered, w1 would keep {1,2,0} and push r3, r4...: an offer counting more deltas than
  // w2's {1,1,1} but without w2's r1, which no worker would push again.
  REQUIRE(first.push(1, 2).what == kind::wait);
  // Replacement 2: w1's last answer is still the dead server's, and it pushes r2 again.
  replacement second;
  REQUIRE(second.offer(1, {1, 1, 0}).what == kind::taken);
  REQUIRE(second.offer(2, {1, 1, 1}).what == kind::taken);
  REQUIRE(second.push(1, 2).what == kind::wait);
  auto o = second.offer(0, {1, 0, 0});
  REQUIRE(o.what == kind::release_each);
  REQUIRE(o.released.size() == 1);
  CHECK(o.released[0].worker == 1);
  CHECK(params_of(o.released[0].answer) == holding({1, 2, 1}));
  CHECK(counts_of(o.released[0].answer) == counts{1, 2, 1});
}

}  // namespace async_failover_test
