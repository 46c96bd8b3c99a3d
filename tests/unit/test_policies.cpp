#include <byteps/partition/by_bytes.hpp>
#include <byteps/schedule/fifo.hpp>
#include <byteps/schedule/priority.hpp>
#include <byteps/core/keys.hpp>
#include <byteps/worker/dispatcher.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace {

bps::Config config_with(std::size_t partition_bytes, int local_size = 1, int credit = 4,
                        bool by_priority = false) {
  bps::Config c;
  c.partition_bytes = partition_bytes;
  c.local_size = local_size;
  c.scheduling_credit = credit;
  c.scheduling_by_priority = by_priority;
  return c;
}

bps::send_task task(std::uint64_t key, std::uint32_t part, int priority, std::uint64_t order,
                    std::size_t bytes) {
  bps::send_task t;
  t.key = key;
  t.part = part;
  t.priority = priority;
  t.order = order;
  t.bytes = bytes;
  return t;
}

// A priority scheduler as the communicator builds it for `by_bytes`.
bps::schedule::priority priority_for(const bps::Config& cfg) {
  return bps::make_scheduler<bps::schedule::priority>(
      cfg, bps::credit_unit_of(bps::partition::by_bytes(cfg)));
}

// Pops `n` tasks whose keys are their expected positions 0 .. n-1, then nothing.
void pops_in_key_order(bps::schedule::priority& s, std::uint64_t n) {
  for (std::uint64_t expected = 0; expected < n; ++expected) {
    auto t = s.pop();
    REQUIRE(t);
    CAPTURE(expected, t->key, t->priority, t->order, t->part);
    CHECK(t->key == expected);
  }
  CHECK_FALSE(s.pop().has_value());
}

}  // namespace

TEST_CASE("fifo pops in push order and counts bytes in flight", "[policies][schedule]") {
  bps::schedule::fifo f(bps::Config{});
  CHECK(f.queued() == 0);
  CHECK(f.in_flight_bytes() == 0);
  CHECK_FALSE(f.pop().has_value());

  // priorities are ignored: push order is all that counts
  f.push(task(1, 0, 0, 0, 100));
  f.push(task(2, 0, 9, 1, 200));
  f.push(task(1, 1, -5, 0, 300));
  f.push(task(3, 7, 100, 2, 400));
  CHECK(f.queued() == 4);
  CHECK(f.in_flight_bytes() == 0);

  auto a = f.pop();
  REQUIRE(a);
  CHECK(a->key == 1);
  CHECK(a->part == 0);
  CHECK(f.in_flight_bytes() == 100);
  CHECK(f.queued() == 3);

  auto b = f.pop();
  REQUIRE(b);
  CHECK(b->key == 2);
  CHECK(f.in_flight_bytes() == 300);

  f.sent(100);
  CHECK(f.in_flight_bytes() == 200);

  auto c = f.pop();
  REQUIRE(c);
  CHECK(c->key == 1);
  CHECK(c->part == 1);
  CHECK(f.in_flight_bytes() == 500);

  auto d = f.pop();
  REQUIRE(d);
  CHECK(d->key == 3);
  CHECK(d->part == 7);
  CHECK(d->bytes == 400);
  CHECK(f.in_flight_bytes() == 900);
  CHECK(f.queued() == 0);
  CHECK_FALSE(f.pop().has_value());

  f.sent(200);
  f.sent(300);
  f.sent(400);
  CHECK(f.in_flight_bytes() == 0);
}

TEST_CASE("fifo passes the context pointer back untouched", "[policies][schedule]") {
  bps::schedule::fifo f(bps::Config{});
  int marker = 0;
  auto t = task(5, 6, 7, 8, 9);
  t.context = &marker;
  f.push(t);
  auto p = f.pop();
  REQUIRE(p);
  CHECK(p->context == &marker);
  CHECK(p->key == 5);
  CHECK(p->part == 6);
  CHECK(p->priority == 7);
  CHECK(p->order == 8);
  CHECK(p->bytes == 9);
}

TEST_CASE("priority pops highest priority, then lower order, then lower part", "[policies][schedule]") {
  auto s = priority_for(config_with(4096000, 1, 0, true));  // no credit bound, by priority
  CHECK(s.by_priority());
  CHECK(s.credit_bytes() == 0);
  CHECK_FALSE(s.pop().has_value());

  // pushed in a scrambled order; key encodes the expected pop position
  s.push(task(6, 1, 0, 5, 10));
  s.push(task(3, 2, 5, 1, 10));
  s.push(task(1, 0, 5, 0, 10));
  s.push(task(7, 0, -3, 0, 10));
  s.push(task(2, 1, 5, 1, 10));
  s.push(task(0, 9, 10, 99, 10));
  s.push(task(5, 0, 0, 5, 10));
  s.push(task(4, 0, 5, 2, 10));
  CHECK(s.queued() == 8);

  pops_in_key_order(s, 8);
  CHECK(s.in_flight_bytes() == 80);
}

TEST_CASE("priority by default goes in call order, then lower part, whatever the priorities",
          "[policies][schedule]") {
  auto s = priority_for(config_with(4096000, 1, 0));  // no credit bound; the default order
  CHECK_FALSE(s.by_priority());
  CHECK_FALSE(bps::Config{}.scheduling_by_priority);
  // pushed in a scrambled order; key encodes the expected pop position
  s.push(task(4, 0, 9, 3, 10));
  s.push(task(1, 1, 0, 0, 10));
  s.push(task(5, 1, 9, 3, 10));
  s.push(task(0, 0, -7, 0, 10));
  s.push(task(3, 0, -1, 2, 10));
  s.push(task(2, 0, 100, 1, 10));
  pops_in_key_order(s, 6);
}

TEST_CASE("priority by default: a later high-priority task waits behind earlier calls",
          "[policies][schedule]") {
  const std::size_t bound = 4096000;
  auto s = priority_for(config_with(bound, 1, 1));
  for (std::uint32_t i = 0; i < 3; ++i) s.push(task(100, i, -10, 0, bound));
  auto first = s.pop();
  REQUIRE(first);
  CHECK(first->key == 100);
  s.push(task(1, 0, 50, 1, bound));  // the first layer, ready later, highest priority
  for (std::uint32_t part = 1; part < 3; ++part) {
    s.sent(bound);
    auto next = s.pop();
    REQUIRE(next);
    CHECK(next->key == 100);
    CHECK(next->part == part);
  }
  s.sent(bound);
  auto last = s.pop();
  REQUIRE(last);
  CHECK(last->key == 1);
}

TEST_CASE("priority bounds bytes in flight by credit x bound", "[policies][schedule]") {
  const auto cfg = config_with(4096000, 1, 2);
  auto s = priority_for(cfg);
  const std::size_t bound = bps::partition::by_bytes(cfg).bound();
  REQUIRE(bound == 4096000);
  CHECK(s.credit_bytes() == 2 * bound);

  for (std::uint32_t i = 0; i < 4; ++i) s.push(task(42, i, 0, 0, bound));

  auto a = s.pop();
  REQUIRE(a);
  CHECK(a->part == 0);
  auto b = s.pop();
  REQUIRE(b);
  CHECK(b->part == 1);
  CHECK(s.in_flight_bytes() == 2 * bound);

  CHECK_FALSE(s.pop().has_value());
  CHECK_FALSE(s.pop().has_value());  // still blocked; nothing was consumed
  CHECK(s.queued() == 2);

  s.sent(bound);
  CHECK(s.in_flight_bytes() == bound);
  auto c = s.pop();
  REQUIRE(c);
  CHECK(c->part == 2);
  CHECK_FALSE(s.pop().has_value());

  s.sent(bound);
  s.sent(bound);
  CHECK(s.in_flight_bytes() == 0);
  auto d = s.pop();
  REQUIRE(d);
  CHECK(d->part == 3);
  CHECK(s.queued() == 0);
}

TEST_CASE("priority credit is in units of the partitioner's bound", "[policies][schedule]") {
  // by_bytes rounds 4097 up to 8192; the credit counts what the partitioner really makes.
  CHECK(priority_for(config_with(4097, 3, 4)).credit_bytes() == 4 * std::size_t{8192});
  // Any partitioner's bound, not only by_bytes's.
  bps::schedule::priority s(config_with(4097, 3, 4), 1000);
  CHECK(s.credit_bytes() == 4000);
}

TEST_CASE("make_scheduler hands the bound to a scheduler that takes it, not to others",
          "[policies][schedule]") {
  const auto cfg = config_with(4096, 1, 3);
  CHECK(bps::make_scheduler<bps::schedule::priority>(cfg, 5000).credit_bytes() == 15000);
  auto f = bps::make_scheduler<bps::schedule::fifo>(cfg, 5000);  // built from the Config alone
  CHECK(f.queued() == 0);
}

TEST_CASE("priority lets one partition larger than the credit go when idle", "[policies][schedule]") {
  const auto cfg = config_with(4096, 1, 1);
  auto s = priority_for(cfg);
  REQUIRE(s.credit_bytes() == 4096);

  s.push(task(1, 0, 0, 0, 1 << 20));
  s.push(task(1, 1, 0, 0, 1));
  auto big = s.pop();
  REQUIRE(big);
  CHECK(big->bytes == (1u << 20));
  CHECK(s.in_flight_bytes() == (1u << 20));
  // with the big one in flight, even one byte more waits
  CHECK_FALSE(s.pop().has_value());
  s.sent(1 << 20);
  auto small = s.pop();
  REQUIRE(small);
  CHECK(small->part == 1);
}

TEST_CASE("priority with credit 0 is unlimited", "[policies][schedule]") {
  auto s = priority_for(config_with(4096, 1, 0));
  CHECK(s.credit_bytes() == 0);
  for (std::uint32_t i = 0; i < 1000; ++i) s.push(task(9, i, 0, 0, 1 << 20));
  for (std::uint32_t i = 0; i < 1000; ++i) {
    auto t = s.pop();
    REQUIRE(t);
    CHECK(t->part == i);
  }
  CHECK(s.in_flight_bytes() == std::size_t{1000} << 20);
  CHECK_FALSE(s.pop().has_value());
}

TEST_CASE("priority: a later high-priority task overtakes queued lower ones", "[policies][schedule]") {
  const auto cfg = config_with(4096000, 1, 1, true);
  auto s = priority_for(cfg);
  const std::size_t bound = 4096000;

  // The last layer's gradient is ready first: many partitions, low priority.
  for (std::uint32_t i = 0; i < 10; ++i) s.push(task(100, i, -10, 0, bound));
  auto first = s.pop();
  REQUIRE(first);
  CHECK(first->key == 100);
  CHECK(first->part == 0);
  CHECK_FALSE(s.pop().has_value());  // credit used up: the rest stay queued

  // The first layer's gradient becomes ready later, with the highest priority.
  s.push(task(1, 0, 0, 1, bound));
  s.push(task(1, 1, 0, 1, bound));

  s.sent(bound);
  auto next = s.pop();
  REQUIRE(next);
  CHECK(next->key == 1);
  CHECK(next->part == 0);
  s.sent(bound);
  next = s.pop();
  REQUIRE(next);
  CHECK(next->key == 1);
  CHECK(next->part == 1);
  s.sent(bound);
  next = s.pop();
  REQUIRE(next);
  CHECK(next->key == 100);
  CHECK(next->part == 1);
}

TEST_CASE("tensor_key is 64-bit FNV-1a", "[policies][keys]") {
  STATIC_REQUIRE(bps::tensor_key("") == 0xcbf29ce484222325ull);
  STATIC_REQUIRE(bps::tensor_key("a") == 0xaf63dc4c8601ec8cull);
  CHECK(bps::tensor_key("foobar") == 0x85944171f73967e8ull);
  // bytes are hashed unsigned
  const std::string high("\xff", 1);
  CHECK(bps::tensor_key(high) == ((0xcbf29ce484222325ull ^ 0xffull) * 0x100000001b3ull));
}

TEST_CASE("tensor_key gives distinct keys to distinct names", "[policies][keys]") {
  std::set<std::uint64_t> keys;
  std::size_t names = 0;
  for (int layer = 0; layer < 1000; ++layer) {
    for (const char* suffix : {".weight", ".bias", ".running_mean", ".running_var"}) {
      keys.insert(bps::tensor_key("model.layers." + std::to_string(layer) + suffix));
      ++names;
    }
  }
  for (int i = 0; i < 1000; ++i) {
    keys.insert(bps::tensor_key("grad_" + std::to_string(i)));
    ++names;
  }
  REQUIRE(names == 5000);
  CHECK(keys.size() == names);
}

TEST_CASE("partition_key mixes the part index into the tensor key", "[policies][keys]") {
  const auto k = bps::tensor_key("w");
  CHECK(bps::partition_key(k, 0) == k);
  CHECK(bps::partition_key(k, 1) == (k ^ 0x9e3779b97f4a7c15ull));
  CHECK(bps::partition_key(k, 1) != bps::partition_key(k, 2));
}

TEST_CASE("server_for is in range and deterministic for every hash fn", "[policies][keys]") {
  const std::array fns{bps::key_hash_fn::djb2, bps::key_hash_fn::sdbm, bps::key_hash_fn::naive,
                       bps::key_hash_fn::built_in};
  for (auto fn : fns) {
    for (int servers = 1; servers <= 7; ++servers) {
      CAPTURE(bps::key_hash_name(fn), servers);
      std::set<int> seen;
      for (int t = 0; t < 50; ++t) {
        const auto key = bps::tensor_key("tensor" + std::to_string(t));
        for (std::uint32_t part = 0; part < 20; ++part) {
          const int s = bps::server_for(key, part, servers, fn);
          REQUIRE(s >= 0);
          REQUIRE(s < servers);
          REQUIRE(bps::server_for(key, part, servers, fn) == s);
          seen.insert(s);
        }
      }
      if (servers == 1) CHECK(seen == std::set<int>{0});
      else CHECK(seen.size() == static_cast<std::size_t>(servers));  // 1000 partitions reach every server
    }
  }
  // key 0 and max key stay in range too
  for (auto fn : fns) {
    CHECK(bps::server_for(0, 0, 3, fn) >= 0);
    CHECK(bps::server_for(0, 0, 3, fn) < 3);
    CHECK(bps::server_for(~0ull, ~0u, 7, fn) >= 0);
    CHECK(bps::server_for(~0ull, ~0u, 7, fn) < 7);
  }
}

TEST_CASE("server_for djb2 hashes the decimal text of the tensor key", "[policies][keys]") {
  // djb2 of "0" is 5381*33 + '0' = 177621; sdbm of "0" is '0' = 48.
  CHECK(bps::server_for(0, 0, 1000000, bps::key_hash_fn::djb2) == 177621);
  CHECK(bps::server_for(0, 0, 1000, bps::key_hash_fn::sdbm) == 48);
  // "12": djb2 = (177622*33) + '2' = 5861576; sdbm = '2' + 49*65599 = 3214401
  CHECK(bps::server_for(12, 0, 100000000, bps::key_hash_fn::djb2) == 5861576);
  CHECK(bps::server_for(12, 0, 100000000, bps::key_hash_fn::sdbm) == 3214401);
  // naive: (tensor >> 16) + tensor, then + part
  CHECK(bps::server_for(0x30000, 2, 1000000, bps::key_hash_fn::naive) == 3 + 0x30000 + 2);
}

TEST_CASE("a tensor's partitions are spread over the servers in turn", "[policies][keys]") {
  for (auto fn : {bps::key_hash_fn::djb2, bps::key_hash_fn::sdbm, bps::key_hash_fn::naive,
                  bps::key_hash_fn::built_in}) {
    for (int servers = 1; servers <= 5; ++servers) {
      const auto key = bps::tensor_key("model.embedding");
      std::vector<int> count(static_cast<std::size_t>(servers), 0);
      for (std::uint32_t part = 0; part < 17; ++part)
        ++count[static_cast<std::size_t>(bps::server_for(key, part, servers, fn))];
      CAPTURE(bps::key_hash_name(fn), servers);
      for (int c : count) {  // 17 partitions: every server holds floor or ceil of 17/servers
        CHECK(c >= 17 / servers);
        CHECK(c <= (17 + servers - 1) / servers);
      }
    }
  }
}

TEST_CASE("djb2 and sdbm spread partitions evenly over 4 servers", "[policies][keys]") {
  for (auto fn : {bps::key_hash_fn::djb2, bps::key_hash_fn::sdbm}) {
    CAPTURE(bps::key_hash_name(fn));
    std::array<int, 4> count{};
    int total = 0;
    for (int t = 0; t < 100; ++t) {
      const auto key = bps::tensor_key("resnet50.layer" + std::to_string(t) + ".conv.weight");
      for (std::uint32_t part = 0; part < 100; ++part) {
        ++count[static_cast<std::size_t>(bps::server_for(key, part, 4, fn))];
        ++total;
      }
    }
    REQUIRE(total == 10000);
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s, count[static_cast<std::size_t>(s)]);
      CHECK(count[static_cast<std::size_t>(s)] >= 1500);
      CHECK(count[static_cast<std::size_t>(s)] <= 3500);
    }
  }
}

TEST_CASE("the priority credit counts in 1 MiB partitions with the automatic size, in the set "
          "partition size otherwise",
          "[policies][schedule]") {
  auto automatic = config_with(0, 1, 4);
  automatic.num_servers = 4;
  CHECK(bps::partition::by_bytes(automatic).bound() == 4096000);
  CHECK(priority_for(automatic).credit_bytes() == 4 * bps::partition::by_bytes::auto_min_bytes);
  // ... and the worker's dispatcher builds its scheduler the same way.
  const bps::worker::dispatcher<bps::partition::by_bytes, bps::schedule::priority> worker(
      automatic);
  CHECK(worker.scheduler().credit_bytes() == 4 * bps::partition::by_bytes::auto_min_bytes);
  // 64 MiB on 4 servers is cut to 1 MiB partitions: the credit is 4 of them.
  const auto parts = bps::partition::by_bytes(automatic).split(std::size_t{64} << 20, 4);
  REQUIRE(parts.size() == 64);
  CHECK(parts.front().bytes == bps::partition::by_bytes::auto_min_bytes);
  CHECK(priority_for(config_with(131072, 1, 4)).credit_bytes() == 4 * 131072);
  CHECK(priority_for(config_with(4096000, 1, 1)).credit_bytes() == 4096000);

  struct bound_only {  // a partitioner with no credit_unit(): the credit counts in bound()s
    explicit bound_only(const bps::Config&) {}
    std::vector<bps::partition_range> split(std::size_t, std::size_t) const { return {}; }
    std::size_t bound() const { return 12288; }
  };
  static_assert(bps::Partitioner<bound_only>);
  CHECK(bps::credit_unit_of(bound_only(automatic)) == 12288);
}
