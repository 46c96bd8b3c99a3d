#include <byteps/server/async_sum.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <byteps/core/error.hpp>
#include <byteps/reduce/half.hpp>

#include "wire_helpers.hpp"

// server::async_sum driven directly, as a server's engine drives it: the seed from rank 0, each
// delta added and answered at once, every dtype, round order and shape checks, and bounded
// staleness holding a worker and releasing it with its own round.

namespace {

using bps::dtype;
using bps::detail::buffer_pool;
using bps::server::outcome;
using kind = bps::server::outcome::kind;
using bps_test::contains;

bps::Config async_config(std::int64_t staleness = -1) {
  bps::Config c;
  c.enable_async = true;
  c.async_staleness = staleness;
  return c;
}

struct driver {
  explicit driver(int workers, std::int64_t staleness = -1)
      : workers(workers), handler(async_config(staleness), pool) {}

  // Worker `worker` pushes `v` (elements of T, as dtype `t`) as round `round` of 'grad'.
  template <class T>
  outcome push(int worker, std::uint64_t round, const std::vector<T>& v, dtype t,
               std::uint64_t tensor_bytes = 0) {
    const std::size_t bytes = v.size() * sizeof(T);
    auto h = bps_test::grad_frame(bps::wire::msg::push, round,
                                  tensor_bytes != 0 ? tensor_bytes : bytes,
                                  static_cast<std::uint32_t>(worker));
    h.dtype = static_cast<std::uint32_t>(t);
    h.payload_bytes = bytes;
    auto b = pool.take(bytes);
    if (bytes != 0) std::memcpy(b.data.get(), v.data(), bytes);
    auto o = handler.handle(bps::server::request{h, bps::server::push_bytes::in(b), worker, workers, false, name});
    pool.give_back(std::move(b));
    return o;
  }
  outcome push(int worker, std::uint64_t round, const std::vector<float>& v) {
    return push(worker, round, v, dtype::float32);
  }
  std::uint64_t version() const { return handler.version(bps_test::grad_key, 0).value(); }

  int workers;
  buffer_pool pool;
  bps::server::async_sum handler;
  std::function<std::string()> name = [] { return std::string("'grad'"); };
};

template <class T>
std::vector<T> values(const bps::server::reply& r) {
  std::vector<T> v(r.bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), r.bytes.data(), r.bytes.size());
  return v;
}
std::vector<float> floats(const outcome& o) { return values<float>(o.answer); }

}  // namespace

TEST_CASE("async_sum needs async mode", "[server][handler][async]") {
  buffer_pool pool;
  bps::Config sync;
  try {
    bps::server::async_sum h(sync, pool);
    FAIL("built in synchronous mode");
  } catch (const bps::usage_error& e) {
    CHECK(contains(e.what(), "BYTEPS_ENABLE_ASYNC=1"));
  }
}

TEST_CASE("async_sum seeds from rank 0's round 0 - the others wait for it and get it",
          "[server][handler][async]") {
  driver d(3);
  CHECK_FALSE(d.handler.version(bps_test::grad_key, 0).has_value());
  CHECK(d.push(2, 0, {7.0f, 7.0f}).what == kind::wait);
  CHECK(d.push(1, 0, {9.0f, 9.0f}).what == kind::wait);
  const auto seed = d.push(0, 0, {1.5f, -2.0f});
  REQUIRE(seed.what == kind::release);  // rank 0 and the two waiting workers
  CHECK(floats(seed) == std::vector<float>{1.5f, -2.0f});
  CHECK(seed.answer.round == 0);
  CHECK(seed.answer.type == dtype::float32);
  CHECK(seed.answer.tensor_bytes == 8);
  CHECK(seed.answer.keep != nullptr);  // a copy: later deltas change the parameters
  CHECK(d.version() == 0);

  // A delta is added, answered at once to its worker alone, with the worker's round.
  const auto a = d.push(1, 1, {0.5f, 1.0f});
  REQUIRE(a.what == kind::answer_now);
  CHECK(floats(a) == std::vector<float>{2.0f, -1.0f});
  CHECK(a.answer.round == 1);
  CHECK(d.version() == 1);
  CHECK(floats(seed) == std::vector<float>{1.5f, -2.0f});  // the seed's copy is untouched
  const auto b = d.push(0, 1, {1.0f, 1.0f});
  REQUIRE(b.what == kind::answer_now);
  CHECK(floats(b) == std::vector<float>{3.0f, 0.0f});
  CHECK(d.version() == 2);
  const auto c = d.push(1, 2, {-3.0f, 0.25f});
  CHECK(floats(c) == std::vector<float>{0.0f, 0.25f});
  CHECK(c.answer.round == 2);
  CHECK(d.version() == 3);
}

TEST_CASE("async_sum answers a round 0 after the seed at once with the current parameters",
          "[server][handler][async]") {
  driver d(2);
  REQUIRE(d.push(0, 0, {10.0f}).what == kind::release);
  REQUIRE(d.push(0, 1, {5.0f}).what == kind::answer_now);
  const auto late = d.push(1, 0, {123.0f});  // its bytes are not used
  REQUIRE(late.what == kind::answer_now);
  CHECK(floats(late) == std::vector<float>{15.0f});
  CHECK(late.answer.round == 0);
  CHECK(d.version() == 1);
}

TEST_CASE("async_sum refuses rounds out of order, other shapes and sum offers, naming them",
          "[server][handler][async]") {
  driver d(2);
  SECTION("a delta before the worker's round 0") {
    const auto o = d.push(1, 1, {1.0f});
    REQUIRE(o.what == kind::refuse);
    CHECK(contains(o.error, "worker 1 pushed round 1 of 'grad' partition 0, but its next round is 0"));
  }
  SECTION("rank 0's delta before its seed, then a skipped and a repeated round") {
    REQUIRE(d.push(0, 2, {1.0f}).what == kind::refuse);
    REQUIRE(d.push(0, 0, {1.0f}).what == kind::release);
    REQUIRE(d.push(0, 0, {1.0f}).what == kind::refuse);
    REQUIRE(d.push(0, 1, {1.0f}).what == kind::answer_now);
    const auto o = d.push(0, 3, {1.0f});
    REQUIRE(o.what == kind::refuse);
    CHECK(contains(o.error, "round 3"));
    CHECK(contains(o.error, "its next round is 2"));
    CHECK(d.version() == 1);  // nothing refused was added
  }
  SECTION("another shape or dtype") {
    REQUIRE(d.push(0, 0, {1.0f, 2.0f}).what == kind::release);
    const auto o = d.push(1, 0, {1.0f});
    REQUIRE(o.what == kind::refuse);
    CHECK(contains(o.error, "different shapes"));
    CHECK(contains(o.error, "worker 1 pushed 1 x float32"));
    const auto t = d.push<std::int32_t>(1, 0, {1, 2}, dtype::int32);
    REQUIRE(t.what == kind::refuse);
    CHECK(contains(t.error, "int32"));
  }
  SECTION("a partial element") {
    const auto o = d.push<std::uint8_t>(0, 0, {1, 2, 3}, dtype::float32, 4);
    REQUIRE(o.what == kind::refuse);
    CHECK(contains(o.error, "not a whole number of float32 elements"));
  }
  SECTION("a sum offer") {
    auto h = bps_test::grad_frame(bps::wire::msg::sum_offer, 0, 4, 0);
    h.payload_bytes = 4;
    auto b = bps_test::pooled_floats(d.pool, {1.0f});
    // Without failover no offer belongs here; with it, one must end with the applied counts
    // (tests/unit/test_async_failover.cpp takes well-formed ones).
    const auto o = d.handler.handle(bps::server::request{h, bps::server::push_bytes::in(b), 0, 2, false, d.name});
    REQUIRE(o.what == kind::refuse);
    CHECK(contains(o.error, "async mode takes pushes only, not a sum_offer of 'grad'"));
    const auto bare = d.handler.handle(bps::server::request{h, bps::server::push_bytes::in(b), 0, 2, true, d.name});
    d.pool.give_back(std::move(b));
    REQUIRE(bare.what == kind::refuse);
    CHECK(contains(bare.error, "a sum_offer of 'grad' partition 0 without the 16 bytes of "
                               "applied counts"));
  }
}

TEMPLATE_TEST_CASE("async_sum adds deltas exactly, integers wrapping", "[server][handler][async]",
                   std::int8_t, std::uint8_t, std::int32_t, std::int64_t) {
  using T = TestType;
  constexpr dtype t = bps::dtype_v<T>;
  using lim = std::numeric_limits<T>;
  driver d(2);
  const std::vector<T> seed{lim::max(), lim::min(), T{0}, T{5}};
  REQUIRE(d.push(0, 0, seed, t).what == kind::release);
  const auto a = d.push<T>(1, 0, {0, 0, 0, 0}, t);
  CHECK(values<T>(a.answer) == seed);
  const auto b = d.push<T>(1, 1, {T{1}, T{1}, lim::max(), T{3}}, t);
  const auto c = d.push<T>(0, 1, {T{1}, static_cast<T>(lim::max()), T{1}, T{7}}, t);
  REQUIRE(c.what == kind::answer_now);
  // Wrapping arithmetic, computed in unsigned: max+1+1 = min+1; min+1+max = 0; 0+max+1 = min.
  const std::vector<T> want{static_cast<T>(lim::min() + 1), T{0}, lim::min(), T{15}};
  CHECK(values<T>(c.answer) == want);
  CHECK(values<T>(b.answer) ==
        std::vector<T>{lim::min(), static_cast<T>(lim::min() + 1), lim::max(), T{8}});
  CHECK(d.version() == 2);
}

TEST_CASE("async_sum keeps fp16 and bf16 parameters in fp32, rounding once per answer",
          "[server][handler][async]") {
  // 2048 + 1 is not an fp16 (its spacing there is 2): added in fp16 every time, the parameter
  // would stay 2048 (ties to even); the fp32 master reaches 2050 after two deltas.
  driver d(1);
  using bps::float16;
  REQUIRE(d.push<float16>(0, 0, {bps::to_float16(2048.0f)}, dtype::float16).what == kind::release);
  const auto one = d.push<float16>(0, 1, {bps::to_float16(1.0f)}, dtype::float16);
  CHECK(bps::to_float(values<float16>(one.answer)[0]) == 2048.0f);  // 2049 rounds to even
  const auto two = d.push<float16>(0, 2, {bps::to_float16(1.0f)}, dtype::float16);
  CHECK(bps::to_float(values<float16>(two.answer)[0]) == 2050.0f);

  driver e(1);  // bf16: spacing 2 at 256
  using bps::bfloat16;
  REQUIRE(e.push<bfloat16>(0, 0, {bps::to_bfloat16(256.0f)}, dtype::bfloat16).what ==
          kind::release);
  e.push<bfloat16>(0, 1, {bps::to_bfloat16(1.0f)}, dtype::bfloat16);
  const auto b = e.push<bfloat16>(0, 2, {bps::to_bfloat16(1.0f)}, dtype::bfloat16);
  CHECK(bps::to_float(values<bfloat16>(b.answer)[0]) == 258.0f);
}

TEST_CASE("async_sum adds fp64 deltas in fp64", "[server][handler][async]") {
  driver d(1);
  REQUIRE(d.push<double>(0, 0, {1.0}, dtype::float64).what == kind::release);
  const auto o = d.push<double>(0, 1, {1e-12}, dtype::float64);
  CHECK(values<double>(o.answer)[0] == 1.0 + 1e-12);
}

TEST_CASE("async_sum without a staleness bound never holds a worker", "[server][handler][async]") {
  driver d(2);
  REQUIRE(d.push(0, 0, {0.0f}).what == kind::release);
  for (std::uint64_t r = 1; r <= 100; ++r) {
    const auto o = d.push(0, r, {1.0f});
    REQUIRE(o.what == kind::answer_now);
    CHECK(floats(o)[0] == static_cast<float>(r));
  }
  CHECK(d.version() == 100);
}

TEST_CASE("async_sum with staleness 1 holds a worker 2 ahead until the slowest catches up",
          "[server][handler][async]") {
  driver d(2, 1);
  REQUIRE(d.push(1, 0, {0.0f}).what == kind::wait);
  REQUIRE(d.push(0, 0, {0.0f}).what == kind::release);
  // Worker 0 runs ahead: its first delta leaves it 1 ahead (allowed), its second 2 (held).
  CHECK(d.push(0, 1, {1.0f}).what == kind::answer_now);
  CHECK(d.push(0, 2, {1.0f}).what == kind::wait);
  CHECK(d.version() == 2);  // a held push is applied, only its answer waits
  // Worker 1's first delta: the slowest count becomes 1, so worker 0 (at 2) is released with
  // its own round 2, and the same parameters worker 1 gets with its round 1.
  const auto o = d.push(1, 1, {10.0f});
  REQUIRE(o.what == kind::release_each);
  CHECK(o.answer.round == 1);
  CHECK(floats(o) == std::vector<float>{12.0f});
  REQUIRE(o.released.size() == 1);
  CHECK(o.released[0].worker == 0);
  CHECK(o.released[0].answer.round == 2);
  CHECK(values<float>(o.released[0].answer) == std::vector<float>{12.0f});
  // Now worker 1 runs ahead, and worker 0 is the slowest.
  CHECK(d.push(1, 2, {1.0f}).what == kind::answer_now);  // 2 vs 2
  CHECK(d.push(1, 3, {1.0f}).what == kind::answer_now);  // 3 vs 2: 1 ahead
  CHECK(d.push(1, 4, {1.0f}).what == kind::wait);        // 4 vs 2: held
  CHECK(d.push(0, 3, {1.0f}).what == kind::release_each);  // 4 vs 3: released
  CHECK(d.version() == 7);
}

TEST_CASE("async_sum with staleness 0 keeps 3 workers in lockstep and releases each with its round",
          "[server][handler][async]") {
  driver d(3, 0);
  REQUIRE(d.push(1, 0, {0.0f}).what == kind::wait);
  REQUIRE(d.push(2, 0, {0.0f}).what == kind::wait);
  REQUIRE(d.push(0, 0, {0.0f}).what == kind::release);
  for (std::uint64_t r = 1; r <= 3; ++r) {
    CAPTURE(r);
    CHECK(d.push(2, r, {1.0f}).what == kind::wait);
    CHECK(d.push(0, r, {10.0f}).what == kind::wait);
    const auto o = d.push(1, r, {100.0f});
    REQUIRE(o.what == kind::release_each);
    CHECK(o.answer.round == r);
    CHECK(floats(o)[0] == 111.0f * static_cast<float>(r));
    REQUIRE(o.released.size() == 2);
    for (const auto& a : o.released) {
      CHECK(a.answer.round == r);
      CHECK(values<float>(a.answer)[0] == 111.0f * static_cast<float>(r));
    }
    CHECK(o.released[0].worker == 0);
    CHECK(o.released[1].worker == 2);
  }
}

TEST_CASE("async_sum counts a worker that never pushed as the slowest", "[server][handler][async]") {
  driver d(3, 1);
  REQUIRE(d.push(0, 0, {0.0f}).what == kind::release);
  REQUIRE(d.push(1, 0, {0.0f}).what == kind::answer_now);
  CHECK(d.push(0, 1, {1.0f}).what == kind::answer_now);
  CHECK(d.push(1, 1, {1.0f}).what == kind::answer_now);
  CHECK(d.push(0, 2, {1.0f}).what == kind::wait);  // worker 2 has pushed nothing
  CHECK(d.push(1, 2, {1.0f}).what == kind::wait);
  CHECK(d.push(2, 0, {0.0f}).what == kind::answer_now);  // a round 0 is no delta
  const auto o = d.push(2, 1, {1.0f});  // the slowest count becomes 1: both released
  REQUIRE(o.what == kind::release_each);
  REQUIRE(o.released.size() == 2);
  CHECK(o.released[0].answer.round == 2);
  CHECK(o.released[1].answer.round == 2);
  CHECK(floats(o)[0] == 5.0f);
}
