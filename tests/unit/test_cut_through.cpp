#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include <byteps/core/config.hpp>
#include <byteps/reduce/half.hpp>
#include <byteps/server/decoding.hpp>
#include <byteps/server/sync_sum.hpp>

#include "reference.hpp"
#include "wire_helpers.hpp"

// Cut-through summation, with the default handler driven directly as a server's engine drives
// it: each push arrives in several calls (as its bytes come in), and the handler answers with
// pieces of the sum as soon as every worker's bytes cover them. The pieces, joined, must be the
// bits of a whole sum taken in worker-rank order, and never come before the bytes they sum.

namespace {

using bps::dtype;
using bps::detail::buffer_pool;
using bps::server::outcome;
using kind = bps::server::outcome::kind;

// One worker's push of one round, arriving in steps.
struct arriving {
  int worker = 0;
  bps::wire::header head;
  std::shared_ptr<std::vector<std::byte>> bytes;
  bps::server::payload_ref ref;
  std::size_t in = 0;  // bytes handed over so far
  bool first = true;
};

struct stream_driver {
  stream_driver(int workers, std::size_t chunk, bool failover = false)
      : workers(workers), failover(failover), cfg(config(chunk)) {}

  static bps::Config config(std::size_t chunk) {
    bps::Config c;
    c.server_chunk_bytes = chunk;
    return c;
  }

  arriving start(int worker, std::uint64_t round, dtype t, std::vector<std::byte> data) {
    arriving a;
    a.worker = worker;
    a.head = bps_test::grad_frame(bps::wire::msg::push, round, data.size(),
                                  static_cast<std::uint32_t>(worker));
    a.head.dtype = static_cast<std::uint32_t>(t);
    a.head.payload_bytes = data.size();
    a.bytes = std::make_shared<std::vector<std::byte>>(std::move(data));
    a.ref = {std::span<const std::byte>(*a.bytes), a.bytes};
    return a;
  }

  // Hands over `a`'s bytes up to `in` (all of them, and its last call, when `complete`).
  outcome call(arriving& a, std::size_t in, bool complete) {
    a.in = complete ? a.bytes->size() : in;
    bps::server::request r{a.head,   bps::server::push_bytes::lent(a.ref, a.in, a.first, complete),
                           a.worker, workers,
                           failover, name};
    a.first = false;
    return handler.handle(r);
  }

  // Worker `worker`'s push of `data` for `round`, whole, as a handler that does not stream
  // (or a server without cut-through) is given it.
  outcome whole(int worker, std::uint64_t round, dtype t, const std::vector<std::byte>& data) {
    auto h = bps_test::grad_frame(bps::wire::msg::push, round, data.size(),
                                  static_cast<std::uint32_t>(worker));
    h.dtype = static_cast<std::uint32_t>(t);
    h.payload_bytes = data.size();
    auto b = pool.take(data.size());
    std::memcpy(b.data.get(), data.data(), data.size());
    auto o = handler.handle(
        bps::server::request{h, bps::server::push_bytes::in(b), worker, workers, failover, name});
    pool.give_back(std::move(b));
    return o;
  }

  int workers;
  bool failover;
  bps::Config cfg;
  buffer_pool pool;
  bps::server::sync_sum handler{cfg, pool};
  std::function<std::string()> name = [] { return std::string("'grad'"); };
};

// `count` values of `t` for worker `w`, small enough that no integer sum of 4 overflows.
std::vector<std::byte> values(dtype t, std::size_t count, int w, bps_test::rng& r) {
  std::vector<std::byte> out(count * bps::dtype_size(t));
  bps::reduce::detail::visit_dtype(t, [&]<class T>(std::type_identity<T>) {
    for (std::size_t i = 0; i < count; ++i) {
      const auto v = r.between(-20, 20) + w;
      T x;
      if constexpr (std::is_same_v<T, bps::float16> || std::is_same_v<T, bps::bfloat16>)
        x = bps_test::ref_narrow(static_cast<float>(v) / 8.0f + 0.3f, T{});
      else if constexpr (std::is_floating_point_v<T>)
        x = static_cast<T>(v) / T(3) + T(0.1);  // not exact: the order of the adds shows
      else if constexpr (std::is_unsigned_v<T>)
        x = static_cast<T>(v + 20);
      else
        x = static_cast<T>(v);
      std::memcpy(out.data() + i * sizeof(T), &x, sizeof(T));
    }
  });
  return out;
}

// The sum of `inputs` in worker-rank order, element by element, as a reference: fp16 and bf16
// widened to fp32, added there and rounded once.
std::vector<std::byte> rank_order_sum(dtype t, const std::vector<std::vector<std::byte>>& inputs) {
  std::vector<std::byte> out(inputs[0].size());
  bps::reduce::detail::visit_dtype(t, [&]<class T>(std::type_identity<T>) {
    const std::size_t count = out.size() / sizeof(T);
    for (std::size_t i = 0; i < count; ++i) {
      auto at = [&](std::size_t w) {
        T x;
        std::memcpy(&x, inputs[w].data() + i * sizeof(T), sizeof(T));
        return x;
      };
      T result;
      if constexpr (std::is_same_v<T, bps::float16> || std::is_same_v<T, bps::bfloat16>) {
        float acc = bps_test::ref_widen(at(0));
        for (std::size_t w = 1; w < inputs.size(); ++w) acc += bps_test::ref_widen(at(w));
        result = bps_test::ref_narrow(acc, T{});
      } else {
        T acc = at(0);
        for (std::size_t w = 1; w < inputs.size(); ++w) acc = static_cast<T>(acc + at(w));
        result = acc;
      }
      std::memcpy(out.data() + i * sizeof(T), &result, sizeof(T));
    }
  });
  return out;
}

// Joins the pieces of one round's answer, checking each starts where the last ended.
struct joined_answer {
  std::vector<std::byte> bytes;
  bool done = false;
  int pieces = 0;

  void add(const outcome& o, std::uint64_t round) {
    REQUIRE_FALSE(done);
    REQUIRE(o.answer.round == round);
    REQUIRE(o.answer.offset == bytes.size());  // partition 0 starts at 0: offsets are in it
    REQUIRE(!o.answer.bytes.empty());
    bytes.insert(bytes.end(), o.answer.bytes.begin(), o.answer.bytes.end());
    ++pieces;
  }
};

// Two workers' float32 pushes of round 0, `count` values each, started on `d`.
struct two_pushes {
  std::vector<std::vector<std::byte>> inputs;
  arriving a, b;
};
two_pushes start_two(stream_driver& d, std::size_t count, std::uint64_t seed) {
  bps_test::rng r{seed};
  two_pushes p;
  p.inputs = {values(dtype::float32, count, 0, r), values(dtype::float32, count, 1, r)};
  p.a = d.start(0, 0, dtype::float32, p.inputs[0]);
  p.b = d.start(1, 0, dtype::float32, p.inputs[1]);
  return p;
}

}  // namespace

static_assert(bps::server::streams_pushes<bps::server::sync_sum>);

TEST_CASE("cut-through sums every dtype in pieces that join into the rank-order sum",
          "[server][handler][cut_through]") {
  constexpr std::size_t chunk = 64;
  bps_test::rng r{20261124};
  for (dtype t : bps::all_dtypes) {
    for (int n = 1; n <= 4; ++n) {
      for (int trial = 0; trial < 6; ++trial) {
        // An odd count, so the last chunk is short; at least two chunks, so the key streams.
        const std::size_t count = static_cast<std::size_t>(r.between(
            static_cast<std::int64_t>(2 * chunk / bps::dtype_size(t)) + 1, 301) | 1);
        CAPTURE(bps::dtype_name(t), n, trial, count);
        stream_driver d(n, chunk);
        for (std::uint64_t round = 0; round < 2; ++round) {
          std::vector<std::vector<std::byte>> inputs;
          std::vector<arriving> pushes;
          for (int w = 0; w < n; ++w) {
            inputs.push_back(values(t, count, w, r));
            pushes.push_back(d.start(w, round, t, inputs.back()));
          }
          joined_answer answer;
          // Seeded random interleaving: a random worker gets 1-3 more chunks, or completes.
          std::vector<bool> complete(static_cast<std::size_t>(n), false);
          for (int left = n; left > 0;) {
            auto w = static_cast<std::size_t>(r.between(0, n - 1));
            if (complete[w]) continue;
            auto& a = pushes[w];
            const std::size_t step = chunk * static_cast<std::size_t>(r.between(1, 3));
            const bool last = a.in + step >= a.bytes->size();
            const auto o = d.call(a, a.in + step, last);
            if (last) {
              complete[w] = true;
              --left;
            }
            std::size_t covered = a.bytes->size();
            for (const auto& p : pushes) covered = std::min(covered, p.first ? 0 : p.in);
            if (o.what == kind::wait) continue;
            if (o.what == kind::release) {  // every push came whole, or all but the last call
              REQUIRE(answer.pieces == 0);
              REQUIRE(left == 0);
              answer.add(o, round);
              answer.done = true;
              continue;
            }
            REQUIRE(o.what == kind::piece);
            answer.add(o, round);
            CHECK(answer.bytes.size() <= covered);  // never a byte before every worker's
            answer.done = o.last;
            CHECK(o.last == (left == 0));
          }
          REQUIRE(answer.done);
          CHECK(answer.bytes == rank_order_sum(t, inputs));
        }
      }
    }
  }
}

TEST_CASE("cut-through sums in worker-rank order whatever order the bytes arrive in",
          "[server][handler][cut_through]") {
  // 1e8 + -1e8 + 1 is 1 in rank order; arrival order (worker 2 first) would give 0.
  const std::vector<float> by_worker{1e8f, -1e8f, 1.0f};
  stream_driver d(3, 64);
  std::vector<arriving> pushes;
  for (int w = 0; w < 3; ++w) {
    std::vector<std::byte> data(256 * sizeof(float));
    for (std::size_t i = 0; i < 256; ++i)
      std::memcpy(data.data() + i * sizeof(float), &by_worker[static_cast<std::size_t>(w)], 4);
    pushes.push_back(d.start(w, 0, dtype::float32, std::move(data)));
  }
  CHECK(d.call(pushes[2], 512, false).what == kind::wait);
  CHECK(d.call(pushes[1], 256, false).what == kind::wait);
  const auto first = d.call(pushes[0], 128, false);  // 128 bytes of all three are in
  REQUIRE(first.what == kind::piece);
  CHECK(first.answer.bytes.size() == 128);
  CHECK(bps_test::as_floats(first.answer.bytes) == std::vector<float>(32, 1.0f));
  CHECK(d.call(pushes[2], 0, true).what == kind::wait);  // worker 0 still has only 128 in
  CHECK(d.call(pushes[1], 0, true).what == kind::wait);
  const auto rest = d.call(pushes[0], 0, true);
  REQUIRE(rest.what == kind::piece);
  CHECK(rest.last);
  CHECK(rest.answer.offset == 128);
  CHECK(bps_test::as_floats(rest.answer.bytes) == std::vector<float>(224, 1.0f));
}

TEST_CASE("cut-through: chunk_for cuts a push in about eight chunks - from half the server's "
          "chunk to all of it - 0 is off",
          "[server][handler][cut_through]") {
  using bps::server::chunk_for;
  using bps::server::streamed_size;
  constexpr std::size_t kib = 1024;
  CHECK(chunk_for(256 * kib, 256 * kib) == 128 * kib);  // half the server's chunk at least
  CHECK(chunk_for(256 * kib, 1024 * kib) == 128 * kib);
  CHECK(chunk_for(256 * kib, 1536 * kib) == 192 * kib);  // an eighth
  CHECK(chunk_for(256 * kib, 2048 * kib) == 256 * kib);
  CHECK(chunk_for(256 * kib, 4096000) == 256 * kib);  // the server's chunk at most
  CHECK(chunk_for(256 * kib, 1100 * kib + 8) == 140864);  // an eighth, rounded up to 64
  CHECK(chunk_for(64, 1) == 64);
  CHECK(chunk_for(64, 1 << 20) == 64);
  CHECK(chunk_for(0, 1 << 20) == 0);
  CHECK(streamed_size(256 * kib, 256 * kib));  // two chunks of 128 KiB
  CHECK_FALSE(streamed_size(256 * kib, 256 * kib - 64));
  CHECK_FALSE(streamed_size(0, 1 << 20));
}

TEST_CASE("cut-through: a push of two half chunks streams - each piece half the server's chunk",
          "[server][handler][cut_through]") {
  constexpr std::size_t chunk = 1024;  // the server's: a push of 1024 bytes goes in 512s
  stream_driver d(2, chunk);
  auto [inputs, a, b] = start_two(d, 256, 29);
  CHECK(d.call(a, 512, false).what == kind::wait);
  const auto first = d.call(b, 600, false);  // 512 bytes of both are in: one half chunk
  REQUIRE(first.what == kind::piece);
  CHECK(first.answer.offset == 0);
  CHECK(first.answer.bytes.size() == 512);
  CHECK_FALSE(first.last);
  CHECK(d.call(a, 0, true).what == kind::wait);
  const auto rest = d.call(b, 0, true);
  REQUIRE(rest.what == kind::piece);
  CHECK(rest.last);
  CHECK(rest.answer.offset == 512);
  std::vector<std::byte> got(first.answer.bytes.begin(), first.answer.bytes.end());
  got.insert(got.end(), rest.answer.bytes.begin(), rest.answer.bytes.end());
  CHECK(got == rank_order_sum(dtype::float32, inputs));
}

TEST_CASE("cut-through answers a round whose pushes all came whole in one release",
          "[server][handler][cut_through]") {
  stream_driver d(2, 64);
  auto [inputs, a, b] = start_two(d, 100, 7);
  CHECK(d.call(a, 0, true).what == kind::wait);
  const auto o = d.call(b, 0, true);
  REQUIRE(o.what == kind::release);
  CHECK(std::vector<std::byte>(o.answer.bytes.begin(), o.answer.bytes.end()) ==
        rank_order_sum(dtype::float32, inputs));
}

TEST_CASE("cut-through: a streamed push to a key of smaller pushes fails the round for both",
          "[server][handler][cut_through]") {
  bps_test::rng r{3};
  const auto small = values(dtype::float32, 16, 0, r);  // 64 bytes: one chunk, not streamed
  const auto big = values(dtype::float32, 256, 1, r);   // 1024 bytes: streamed
  SECTION("the small push first") {
    stream_driver d(2, 64);
    CHECK(d.whole(0, 0, dtype::float32, small).what == kind::wait);
    auto b = d.start(1, 0, dtype::float32, big);
    const auto o = d.call(b, 128, false);  // its first call joins the round, and ends it
    REQUIRE(o.what == kind::fail_round);
    CHECK(bps_test::contains(o.error, "different shapes"));
    CHECK(d.call(b, 512, false).what == kind::taken);
    CHECK(d.call(b, 0, true).what == kind::taken);
  }
  SECTION("the streamed push first") {
    stream_driver d(2, 64);
    auto b = d.start(1, 0, dtype::float32, big);
    CHECK(d.call(b, 128, false).what == kind::wait);
    CHECK(d.whole(0, 0, dtype::float32, small).what == kind::wait);  // worker 1 still arriving
    const auto o = d.call(b, 0, true);
    REQUIRE(o.what == kind::fail_round);  // no piece of a poisoned round ever went out
    CHECK(bps_test::contains(o.error, "different shapes"));
  }
}

TEST_CASE("cut-through: the later calls of a push refused on a new key are ignored",
          "[server][handler][cut_through]") {
  stream_driver d(2, 64);
  std::vector<std::byte> odd(1026);  // not a whole number of float32 elements
  auto a = d.start(0, 0, dtype::float32, odd);
  const auto o = d.call(a, 128, false);
  REQUIRE(o.what == kind::refuse);
  CHECK(bps_test::contains(o.error, "not a whole number of float32 elements"));
  CHECK(d.call(a, 512, false).what == kind::taken);
  CHECK(d.call(a, 0, true).what == kind::taken);
}

TEST_CASE("cut-through: a key big enough to stream still sums whole pushes exactly",
          "[server][handler][cut_through]") {
  // A handler that wraps sync_sum without declaring cut_through gets every push whole.
  bps_test::rng r{11};
  for (dtype t : {dtype::float16, dtype::bfloat16, dtype::float32, dtype::int64}) {
    CAPTURE(bps::dtype_name(t));
    stream_driver d(3, 64);
    for (std::uint64_t round = 0; round < 3; ++round) {
      std::vector<std::vector<std::byte>> inputs;
      for (int w = 0; w < 3; ++w) inputs.push_back(values(t, 301, w, r));
      CHECK(d.whole(2, round, t, inputs[2]).what == kind::wait);
      CHECK(d.whole(0, round, t, inputs[0]).what == kind::wait);
      const auto o = d.whole(1, round, t, inputs[1]);
      REQUIRE(o.what == kind::release);
      // Without failover a whole push is added as it comes: the arrival order 2, 0, 1.
      const std::vector<std::byte> got(o.answer.bytes.begin(), o.answer.bytes.end());
      CHECK(got == rank_order_sum(t, {inputs[2], inputs[0], inputs[1]}));
    }
  }
}

// Elastic mode (docs/plans/issue-39-elastic.md): the handler restarts every round in flight
// when workers are removed, and says who must push again.

static_assert(bps::server::restarts_rounds<bps::server::sync_sum>);
static_assert(bps::server::restarts_rounds<bps::server::decoding<bps::server::sync_sum>>);

TEST_CASE("elastic: restart_rounds names the members that must push a round again, and the "
          "round then completes with the members alone",
          "[server][elastic]") {
  stream_driver d(3, 0);
  bps_test::rng r{7};
  std::vector<std::vector<std::byte>> x;
  for (int w = 0; w < 3; ++w) x.push_back(values(dtype::float32, 16, w, r));
  CHECK(d.whole(0, 0, dtype::float32, x[0]).what == kind::wait);
  CHECK(d.whole(2, 0, dtype::float32, x[2]).what == kind::wait);
  const auto redo = d.handler.restart_rounds({true, true, false});
  REQUIRE(redo.size() == 1);
  CHECK(redo[0].key == bps_test::grad_key);
  CHECK(redo[0].part == 0);
  CHECK(redo[0].round == 0);
  CHECK(redo[0].workers == std::vector<int>{0});
  const auto late = d.whole(2, 0, dtype::float32, x[2]);
  CHECK(late.what == kind::refuse);
  CHECK(late.error.find("no longer a member") != std::string::npos);
  CHECK(d.whole(1, 0, dtype::float32, x[1]).what == kind::wait);
  const auto done = d.whole(0, 0, dtype::float32, x[0]);
  REQUIRE(done.what == kind::release);
  CHECK(std::vector<std::byte>(done.answer.bytes.begin(), done.answer.bytes.end()) ==
        rank_order_sum(dtype::float32, {x[0], x[1]}));
  // Nothing in flight: nobody to redo.
  CHECK(d.handler.restart_rounds({true, true, false}).empty());
}

TEST_CASE("elastic: a key first pushed after restart_rounds takes its members, streamed too",
          "[server][elastic]") {
  for (const std::size_t chunk : {std::size_t{0}, std::size_t{64}}) {
    CAPTURE(chunk);
    stream_driver d(3, chunk);
    bps_test::rng r{11};
    std::vector<std::vector<std::byte>> x;
    for (int w = 0; w < 3; ++w) x.push_back(values(dtype::float32, 256, w, r));
    CHECK(d.handler.restart_rounds({false, true, true}).empty());
    joined_answer answer;
    auto a2 = d.start(2, 0, dtype::float32, x[2]);
    auto a1 = d.start(1, 0, dtype::float32, x[1]);
    for (auto* a : {&a2, &a1}) {
      const auto o = d.call(*a, 0, true);
      if (o.what == kind::piece || o.what == kind::release) answer.add(o, 0);
    }
    CHECK(answer.bytes == rank_order_sum(dtype::float32, {x[1], x[2]}));
  }
}
