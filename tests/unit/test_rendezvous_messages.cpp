#include <byteps/rendezvous/messages.hpp>

#include <byteps/core/config.hpp>
#include <byteps/wire/codec.hpp>

#include <catch2/catch.hpp>

#include "wire_helpers.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// Rendezvous messages: hello and welcome encoding, and first_difference's messages.

namespace {

using bps_test::contains;
using bps_test::u32_max;

std::span<const std::byte> prefix(const std::vector<std::byte>& v, std::size_t n) {
  return std::span<const std::byte>(v.data(), n);
}

bps::rendezvous::hello sample_hello() {
  bps::rendezvous::hello h;
  h.protocol = bps::rendezvous::protocol_version;
  h.node_role = bps::role::server;
  h.requested_rank = 0x7FFFFFF0;
  h.local_rank = 2;
  h.local_size = 3;
  h.host = "server-7.cluster.example";
  h.port = 65535;
  h.partition_bytes = 0xFEDCBA9876543210ull;
  h.num_workers = 123;
  h.num_servers = 45;
  h.key_hash = "sdbm";
  h.mixed_mode = 1;
  h.failover = true;
  h.standby = true;
  h.async_mode = true;
  h.staleness = 0x0102030405060708ll;
  h.min_workers = 2;
  h.max_workers = 0x01020304;
  h.shares_memory = true;
  return h;
}

void check_same(const bps::rendezvous::hello& a, const bps::rendezvous::hello& b) {
  CHECK(a.protocol == b.protocol);
  CHECK(a.node_role == b.node_role);
  CHECK(a.requested_rank == b.requested_rank);
  CHECK(a.local_rank == b.local_rank);
  CHECK(a.local_size == b.local_size);
  CHECK(a.host == b.host);
  CHECK(a.port == b.port);
  CHECK(a.partition_bytes == b.partition_bytes);
  CHECK(a.num_workers == b.num_workers);
  CHECK(a.num_servers == b.num_servers);
  CHECK(a.key_hash == b.key_hash);
  CHECK(a.mixed_mode == b.mixed_mode);
  CHECK(a.failover == b.failover);
  CHECK(a.standby == b.standby);
  CHECK(a.async_mode == b.async_mode);
  CHECK(a.staleness == b.staleness);
  CHECK(a.min_workers == b.min_workers);
  CHECK(a.max_workers == b.max_workers);
  CHECK(a.shares_memory == b.shares_memory);
}

bps::rendezvous::welcome sample_welcome() {
  bps::rendezvous::welcome m;
  m.rank = 3;
  m.num_workers = 8;
  m.num_servers = 3;
  m.global_rank = 11;
  m.global_size = 20;
  m.slices = 4;
  m.job_id = 0xFEEDFACECAFEBEEFull;
  m.servers = {{"10.0.0.1", 9000}, {"", 1}, {"host-with-a-longer-name.example.org", 65535}};
  m.epoch = 0x0102030405060708ull;  // a worker that joined a running elastic job
  m.in_shared_memory = true;
  return m;
}

}  // namespace

TEST_CASE("rendezvous hello round-trips", "[wire][rendezvous]") {
  const auto h = sample_hello();
  const auto bytes = bps::rendezvous::encode(h);
  // protocol, role, requested rank, local rank, local size, host, port, partition bytes,
  // workers, servers, key hash, mixed mode, failover, standby, async, staleness, the elastic
  // bounds, shares_memory (the job token travels as a proof after these bytes, never in them:
  // auth.hpp)
  CHECK(bytes.size() == 4 + 1 + 4 + 4 + 4 + 4 + h.host.size() + 2 + 8 + 4 + 4 + 4 +
                            h.key_hash.size() + 1 + 1 + 1 + 1 + 8 + 4 + 4 + 1);
  check_same(bps::rendezvous::decode_hello(bytes), h);

  for (auto r : {bps::role::scheduler, bps::role::server, bps::role::worker}) {
    auto h2 = sample_hello();
    h2.node_role = r;
    h2.requested_rank = -1;
    h2.host = "";
    h2.port = 0;
    h2.standby = r == bps::role::server;
    check_same(bps::rendezvous::decode_hello(bps::rendezvous::encode(h2)), h2);
  }
}

TEST_CASE("rendezvous hello from a Config", "[wire][rendezvous]") {
  bps::Config c;
  c.num_workers = 4;
  c.num_servers = 2;
  c.worker_id = 3;
  c.partition_bytes = 8192;
  c.key_hash = bps::key_hash_fn::naive;
  const auto w = bps::rendezvous::hello::from(c, bps::role::worker);
  CHECK(w.protocol == bps::rendezvous::protocol_version);
  CHECK(w.node_role == bps::role::worker);
  CHECK(w.requested_rank == 3);
  CHECK(w.partition_bytes == 8192);
  CHECK(w.num_workers == 4);
  CHECK(w.num_servers == 2);
  CHECK(w.key_hash == "naive");
  CHECK_FALSE(w.async_mode);
  CHECK(w.staleness == -1);
  c.enable_async = true;
  c.async_staleness = 5;
  const auto a = bps::rendezvous::hello::from(c, bps::role::worker);
  CHECK(a.async_mode);
  CHECK(a.staleness == 5);
  CHECK(a.min_workers == 0);
  CHECK(a.max_workers == 0);
  c.min_workers = 1;
  c.max_workers = 6;
  const auto e = bps::rendezvous::hello::from(c, bps::role::worker);
  CHECK(e.min_workers == 1);
  CHECK(e.max_workers == 6);
  const auto s = bps::rendezvous::hello::from(c, bps::role::server);
  CHECK(s.node_role == bps::role::server);
  CHECK(s.requested_rank == -1);
}

TEST_CASE("rendezvous hello refuses bad payloads", "[wire][rendezvous]") {
  const auto bytes = bps::rendezvous::encode(sample_hello());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS(bps::rendezvous::decode_hello(prefix(bytes, n)), bps::wire::decode_error);
  }
  // trailing bytes
  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(longer), bps::wire::decode_error);
  // a shares_memory flag that is neither 0 nor 1 (the last byte)
  auto bad_flag = bytes;
  bad_flag.back() = std::byte{2};
  CHECK_THROWS_WITH(bps::rendezvous::decode_hello(bad_flag),
                    Catch::Contains("shares_memory flag is neither 0 nor 1"));
  // unknown role byte (offset 4)
  auto bad_role = bytes;
  bad_role[4] = std::byte{3};
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bad_role), bps::wire::decode_error);
  // a local rank outside its local size, or an absurd local size
  auto h = sample_hello();
  h.local_rank = 3;
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)), bps::wire::decode_error);
  h.local_rank = 0;
  h.local_size = 0;
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)), bps::wire::decode_error);
  // over-long key hash name
  h = sample_hello();
  h.key_hash = std::string(33, 'k');
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)), bps::wire::decode_error);
  // over-long host
  h = sample_hello();
  h.host = std::string(257, 'h');
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)), bps::wire::decode_error);
  h.host = std::string(256, 'h');
  CHECK(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)).host == h.host);
}

TEST_CASE("rendezvous hello carries failover and standby, and refuses bad flags",
          "[wire][rendezvous][failover]") {
  bps::Config c;
  c.node_role = bps::role::server;
  c.failover_timeout = std::chrono::milliseconds(5000);
  c.server_standby = true;
  const auto s = bps::rendezvous::hello::from(c, bps::role::server);
  CHECK(s.failover);
  CHECK(s.standby);
  const auto w = bps::rendezvous::hello::from(c, bps::role::worker);  // only servers stand by
  CHECK(w.failover);
  CHECK_FALSE(w.standby);
  CHECK_FALSE(bps::rendezvous::hello::from(bps::Config{}, bps::role::worker).failover);

  auto bytes = bps::rendezvous::encode(sample_hello());
  // failover and standby: before the async flag, the staleness, the elastic bounds and
  // shares_memory
  for (std::size_t at : {bytes.size() - 20, bytes.size() - 19}) {
    auto bad = bytes;
    bad[at] = std::byte{2};
    CHECK_THROWS_AS(bps::rendezvous::decode_hello(bad), bps::wire::decode_error);
  }
  auto h = sample_hello();
  h.node_role = bps::role::worker;  // a worker that says it stands by
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)),
                  bps::wire::decode_error);
}

TEST_CASE("rendezvous hello refuses a bad async flag or staleness", "[wire][rendezvous][async]") {
  auto bytes = bps::rendezvous::encode(sample_hello());
  auto bad = bytes;
  bad[bytes.size() - 18] = std::byte{2};  // the async flag, before staleness, the bounds and
                                          // shares_memory
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bad), bps::wire::decode_error);
  auto h = sample_hello();
  h.staleness = -1;  // unbounded
  CHECK(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)).staleness == -1);
  h.staleness = -2;
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)),
                  bps::wire::decode_error);
}

TEST_CASE("rendezvous hello refuses negative elastic bounds", "[wire][rendezvous][elastic]") {
  for (bool max : {false, true}) {
    auto h = sample_hello();
    (max ? h.max_workers : h.min_workers) = -1;
    CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)),
                    bps::wire::decode_error);
  }
}

TEST_CASE("rendezvous server_replaced round-trips and refuses bad payloads",
          "[wire][rendezvous][failover]") {
  const bps::rendezvous::server_replaced m{3, {"10.1.2.3", 40001}};
  const auto bytes = bps::rendezvous::encode(m);
  CHECK(bytes.size() == 4 + 4 + m.where.host.size() + 2);
  CHECK(bps::rendezvous::decode_server_replaced(bytes) == m);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS(bps::rendezvous::decode_server_replaced(prefix(bytes, n)),
                    bps::wire::decode_error);
  }
  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(bps::rendezvous::decode_server_replaced(longer), bps::wire::decode_error);
  const bps::rendezvous::server_replaced negative{-1, {"h", 1}};
  CHECK_THROWS_AS(bps::rendezvous::decode_server_replaced(bps::rendezvous::encode(negative)),
                  bps::wire::decode_error);
}

TEST_CASE("rendezvous hello of another protocol decodes only its protocol", "[wire][rendezvous]") {
  auto h = sample_hello();
  h.protocol = 99;
  auto bytes = bps::rendezvous::encode(h);
  const auto d = bps::rendezvous::decode_hello(bytes);
  CHECK(d.protocol == 99);
  // the rest is left at its defaults, not read with this build's layout
  CHECK(d.host.empty());
  CHECK(d.num_workers == 0);
}

TEST_CASE("rendezvous welcome round-trips", "[wire][rendezvous]") {
  const auto m = sample_welcome();
  const auto bytes = bps::rendezvous::encode(m);
  CHECK(bytes.size() == 36 + (4 + 8 + 2) + (4 + 0 + 2) + (4 + 35 + 2) + 8 + 1);
  CHECK(bps::rendezvous::decode_welcome(bytes) == m);
  CHECK(bps::rendezvous::decode_welcome(bytes).in_shared_memory);

  bps::rendezvous::welcome empty;
  empty.rank = -1;
  const auto eb = bps::rendezvous::encode(empty);
  CHECK(eb.size() == 36 + 8 + 1);
  CHECK(bps::rendezvous::decode_welcome(eb) == empty);
  CHECK_FALSE(bps::rendezvous::decode_welcome(eb).in_shared_memory);
}

TEST_CASE("rendezvous welcome refuses bad payloads", "[wire][rendezvous]") {
  const auto bytes = bps::rendezvous::encode(sample_welcome());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK_THROWS_AS(bps::rendezvous::decode_welcome(prefix(bytes, n)), bps::wire::decode_error);
  }
  auto longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_THROWS_AS(bps::rendezvous::decode_welcome(longer), bps::wire::decode_error);

  // a hostile server count is refused before anything is allocated for it
  bps::wire::byte_writer w;
  w.put(std::int32_t{0});
  w.put(std::int32_t{1});
  w.put(std::int32_t{1});
  w.put(std::int32_t{0});
  w.put(std::int32_t{1});
  w.put(std::int32_t{1});
  w.put(std::uint64_t{7});
  w.put(u32_max);
  CHECK_THROWS_AS(bps::rendezvous::decode_welcome(w.take()), bps::wire::decode_error);

  // a slice count out of range
  auto m = sample_welcome();
  m.slices = 0;
  CHECK_THROWS_AS(bps::rendezvous::decode_welcome(bps::rendezvous::encode(m)), bps::wire::decode_error);
  m.slices = 1025;
  CHECK_THROWS_AS(bps::rendezvous::decode_welcome(bps::rendezvous::encode(m)), bps::wire::decode_error);

  // an in_shared_memory flag that is neither 0 nor 1
  auto flag = bytes;
  flag.back() = std::byte{2};
  CHECK_THROWS_WITH(bps::rendezvous::decode_welcome(flag),
                    Catch::Contains("in_shared_memory flag is neither 0 nor 1"));
}

TEST_CASE("first_difference finds the differing setting", "[wire][rendezvous]") {
  bps::rendezvous::hello mine;
  mine.node_role = bps::role::scheduler;
  mine.partition_bytes = 4096000;
  mine.num_workers = 4;
  mine.num_servers = 2;
  mine.key_hash = "djb2";

  auto theirs = mine;
  theirs.node_role = bps::role::worker;
  theirs.host = "10.1.2.3";
  const std::string where = "10.1.2.3:4567";

  SECTION("equal settings") {
    CHECK_FALSE(bps::rendezvous::first_difference(mine, theirs, where).has_value());
    theirs.node_role = bps::role::server;
    CHECK_FALSE(bps::rendezvous::first_difference(mine, theirs, where).has_value());
  }

  auto expect = [&](std::initializer_list<std::string_view> parts) {
    const auto d = bps::rendezvous::first_difference(mine, theirs, where);
    REQUIRE(d.has_value());
    CAPTURE(*d);
    for (auto p : parts) CHECK(contains(*d, p));
  };

  SECTION("partition bytes") {
    theirs.partition_bytes = 8192000;
    expect({"BYTEPS_PARTITION_BYTES", "has 8192000", "the scheduler has 4096000", where, "worker"});
  }
  SECTION("auto partition bytes against a fixed size") {
    theirs.partition_bytes = 0;
    expect({"BYTEPS_PARTITION_BYTES", "has 0 (auto)", "the scheduler has 4096000", where});
  }
  SECTION("worker count") {
    theirs.num_workers = 5;
    expect({"DMLC_NUM_WORKER", "has 5", "the scheduler has 4", where});
  }
  SECTION("server count") {
    theirs.num_servers = 17;
    expect({"DMLC_NUM_SERVER", "has 17", "the scheduler has 2", where});
  }
  SECTION("key hash of a worker") {
    theirs.key_hash = "sdbm";
    expect({"BYTEPS_KEY_HASH_FN", "has sdbm", "the scheduler has djb2", where, "worker"});
  }
  SECTION("mixed mode of a worker") {
    theirs.mixed_mode = 1;
    expect({"BYTEPS_ENABLE_MIXED_MODE", "has 1", "the scheduler has 0", where, "worker"});
  }
  SECTION("key hash of a server does not matter") {
    theirs.node_role = bps::role::server;
    theirs.key_hash = "sdbm";
    CHECK_FALSE(bps::rendezvous::first_difference(mine, theirs, where).has_value());
  }
  SECTION("failover on one side only") {
    theirs.failover = !mine.failover;
    expect({"BYTEPS_FAILOVER_TIMEOUT_MS", where});
  }
  SECTION("async mode on one side only, worker or server") {
    theirs.async_mode = true;
    expect({"BYTEPS_ENABLE_ASYNC differs", "has 1 (asynchronous)",
            "the scheduler has 0 or unset (synchronous)", where, "worker"});
    theirs.node_role = bps::role::server;
    expect({"BYTEPS_ENABLE_ASYNC differs", "the server at", where});
  }
  SECTION("async staleness differs") {
    mine.async_mode = theirs.async_mode = true;
    theirs.staleness = 2;
    expect({"BYTEPS_ASYNC_STALENESS differs", "has 2", "the scheduler has unset (unbounded)",
            where});
  }
  SECTION("elastic bounds differ") {
    theirs.min_workers = 2;
    expect({"BYTEPS_MIN_NUM_WORKER differs", "has 2", "the scheduler has unset", where});
    theirs.min_workers = 0;
    mine.max_workers = 8;
    expect({"BYTEPS_MAX_NUM_WORKER differs", "has unset", "the scheduler has 8", where});
  }
  // A later generation than ours, whatever ours is.
  const std::uint32_t other = bps::rendezvous::protocol_version + 1;
  SECTION("protocol") {
    theirs.protocol = other;
    const auto ours = "the scheduler speaks " + std::to_string(bps::rendezvous::protocol_version);
    expect({"protocol", "speaks " + std::to_string(other), ours, where});
  }
  SECTION("the first difference is reported: protocol before counts") {
    theirs.protocol = other;
    theirs.num_workers = 99;
    const auto d = bps::rendezvous::first_difference(mine, theirs, where);
    REQUIRE(d.has_value());
    CHECK(contains(*d, "protocol"));
    CHECK_FALSE(contains(*d, "DMLC_NUM_WORKER"));
  }
}

TEST_CASE("a hello proves the job token for one nonce only, and never carries it", "[wire][rendezvous]") {
  namespace rv = bps::rendezvous;
  const auto h = sample_hello();
  const rv::nonce n = rv::fresh_nonce();
  const auto sent = rv::encode_proved(h, "our-secret", n);
  const std::string as_text(reinterpret_cast<const char*>(sent.data()), sent.size());
  CHECK(as_text.find("our-secret") == std::string::npos);
  const auto parts = rv::split_proof(sent);
  REQUIRE(parts);
  check_same(rv::decode_hello(parts->first), h);
  CHECK(rv::verify("our-secret", rv::purpose::scheduler_hello, n, parts->first, parts->second));
  // Another job's token, a replay on a connection with another nonce, the proof of a server
  // hello, or one altered byte: each fails.
  CHECK_FALSE(rv::verify("another-job", rv::purpose::scheduler_hello, n, parts->first, parts->second));
  const rv::nonce other = rv::fresh_nonce();
  REQUIRE(other != n);
  CHECK_FALSE(rv::verify("our-secret", rv::purpose::scheduler_hello, other, parts->first, parts->second));
  CHECK_FALSE(rv::verify("our-secret", rv::purpose::server_hello, n, parts->first, parts->second));
  auto altered = sent;
  altered[5] ^= std::byte{1};
  const auto bad = rv::split_proof(altered);
  CHECK_FALSE(rv::verify("our-secret", rv::purpose::scheduler_hello, n, bad->first, bad->second));
  CHECK(rv::hello_protocol(sent) == rv::protocol_version);
  CHECK_FALSE(rv::split_proof(std::span(sent).first(rv::proof_bytes)));
  // A worker's peer_hello binds its machine and local rank.
  const auto p = rv::peer_hello_proof("our-secret", n, 1, 0);
  CHECK(rv::verify_peer_hello("our-secret", n, 1, 0, p));
  CHECK_FALSE(rv::verify_peer_hello("our-secret", n, 0, 0, p));
  CHECK_FALSE(rv::verify_peer_hello("our-secret", n, 1, 1, p));
  CHECK_FALSE(rv::verify_peer_hello("", n, 1, 0, p));
}
