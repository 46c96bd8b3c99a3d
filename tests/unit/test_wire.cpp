#include <byteps/wire/frame.hpp>
#include <byteps/wire/codec.hpp>
#include <byteps/rendezvous/messages.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

using bps::wire::decode_status;
using bps::wire::header;
using bps::wire::msg;

constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint32_t u32_max = std::numeric_limits<std::uint32_t>::max();

header distinctive(msg type) {
  header h;
  h.type = type;
  h.flags = 0xA1B2C3D4u;
  h.sender = 0x01020304u;
  h.key = 0x1122334455667788ull;
  h.part = 0xCAFEBABEu;
  h.dtype = 7;
  h.round = u64_max;
  h.payload_bytes = 123456789;
  h.tensor_bytes = 0xFEDCBA9876543210ull;
  h.offset = 0x0F0E0D0C0B0A0908ull;
  return h;
}

std::uint8_t byte_at(const bps::wire::header_bytes& b, std::size_t i) {
  return std::to_integer<std::uint8_t>(b[i]);
}

bps::wire::header_bytes bytes_of(std::string_view text) {
  bps::wire::header_bytes b{};
  for (std::size_t i = 0; i < b.size() && i < text.size(); ++i) b[i] = static_cast<std::byte>(text[i]);
  return b;
}

void set_u16(bps::wire::header_bytes& b, std::size_t at, std::uint16_t v) {
  b[at] = static_cast<std::byte>(v & 0xff);
  b[at + 1] = static_cast<std::byte>(v >> 8);
}

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

std::span<const std::byte> prefix(const std::vector<std::byte>& v, std::size_t n) {
  return std::span<const std::byte>(v.data(), n);
}

}  // namespace

TEST_CASE("wire header round-trips every field for every message type", "[wire][frame]") {
  for (std::uint16_t t = 1; t <= bps::wire::max_msg; ++t) {
    const auto type = static_cast<msg>(t);
    CAPTURE(t, bps::wire::msg_name(type));
    CHECK(bps::wire::msg_name(type) != "unknown");
    const header h = distinctive(type);
    const auto bytes = bps::wire::encode(h);
    const auto r = bps::wire::decode(bytes, u64_max);
    REQUIRE(r.status == decode_status::ok);
    REQUIRE(static_cast<bool>(r));
    CHECK(r.reason.empty());
    CHECK(r.value == h);
    CHECK(r.value.type == type);
    CHECK(r.value.round == u64_max);
  }
}

TEST_CASE("wire header round-trips all-max and all-zero values", "[wire][frame]") {
  header h;
  h.type = msg::pull_response;
  h.flags = u32_max;
  h.sender = u32_max;
  h.key = u64_max;
  h.part = u32_max;
  h.dtype = u32_max;
  h.round = u64_max;
  h.payload_bytes = u64_max;
  h.tensor_bytes = u64_max;
  h.offset = u64_max;
  auto r = bps::wire::decode(bps::wire::encode(h), u64_max);
  REQUIRE(r);
  CHECK(r.value == h);

  header zero;
  zero.type = msg::hello;
  auto rz = bps::wire::decode(bps::wire::encode(zero), 0);
  REQUIRE(rz);
  CHECK(rz.value == zero);
}

TEST_CASE("wire header byte layout is fixed little-endian", "[wire][frame]") {
  STATIC_REQUIRE(bps::wire::header_size == 64);
  header h = distinctive(msg::push);
  h.key = 0x0102030405060708ull;
  h.payload_bytes = 0x1122;
  const auto b = bps::wire::encode(h);

  // magic "BPS1" at offset 0
  CHECK(byte_at(b, 0) == 'B');
  CHECK(byte_at(b, 1) == 'P');
  CHECK(byte_at(b, 2) == 'S');
  CHECK(byte_at(b, 3) == '1');
  // format version 1 at offset 4, u16 LE
  CHECK(byte_at(b, 4) == 1);
  CHECK(byte_at(b, 5) == 0);
  // type at offset 6 (push = 10)
  CHECK(byte_at(b, 6) == 10);
  CHECK(byte_at(b, 7) == 0);
  // flags 0xA1B2C3D4 at 8
  CHECK(byte_at(b, 8) == 0xD4);
  CHECK(byte_at(b, 9) == 0xC3);
  CHECK(byte_at(b, 10) == 0xB2);
  CHECK(byte_at(b, 11) == 0xA1);
  // sender 0x01020304 at 12
  CHECK(byte_at(b, 12) == 0x04);
  CHECK(byte_at(b, 15) == 0x01);
  // key at 16, little-endian
  for (std::size_t i = 0; i < 8; ++i) {
    CAPTURE(i);
    CHECK(byte_at(b, 16 + i) == 8 - i);
  }
  // round (u64 max) at 32
  for (std::size_t i = 32; i < 40; ++i) CHECK(byte_at(b, i) == 0xFF);
  // payload_bytes at 40
  CHECK(byte_at(b, 40) == 0x22);
  CHECK(byte_at(b, 41) == 0x11);
  for (std::size_t i = 42; i < 48; ++i) CHECK(byte_at(b, i) == 0);
  // offset 0x0F0E0D0C0B0A0908 at 56
  CHECK(byte_at(b, 56) == 0x08);
  CHECK(byte_at(b, 63) == 0x0F);

  // The span overload writes the same bytes as the value-returning one.
  bps::wire::header_bytes out{};
  bps::wire::encode(h, out);
  CHECK(out == b);
}

TEST_CASE("wire header refuses bad magic (an HTTP request)", "[wire][frame]") {
  const auto b = bytes_of("GET / HTTP/1.1\r\nHost: example.org\r\nUser-Agent: curl/8.0\r\nAccept: */*\r\n");
  const auto r = bps::wire::decode(b, u64_max);
  CHECK_FALSE(static_cast<bool>(r));
  CHECK(r.status == decode_status::bad_magic);
  // "GET " read as a little-endian u32
  CAPTURE(r.reason);
  CHECK(contains(r.reason, "0x20544547"));
  CHECK(contains(r.reason, "magic"));

  // A single flipped byte in the magic is refused as well.
  auto good = bps::wire::encode(distinctive(msg::hello));
  good[3] = static_cast<std::byte>('2');
  const auto r2 = bps::wire::decode(good, u64_max);
  CHECK(r2.status == decode_status::bad_magic);
  CHECK(contains(r2.reason, "0x32535042"));
}

TEST_CASE("wire header refuses another format version", "[wire][frame]") {
  for (std::uint16_t v : {std::uint16_t{0}, std::uint16_t{2}, std::uint16_t{0x1234}}) {
    auto b = bps::wire::encode(distinctive(msg::push));
    set_u16(b, 4, v);
    const auto r = bps::wire::decode(b, u64_max);
    CAPTURE(v, r.reason);
    CHECK_FALSE(static_cast<bool>(r));
    CHECK(r.status == decode_status::bad_version);
    CHECK(contains(r.reason, "format " + std::to_string(v)));
  }
}

TEST_CASE("wire header refuses unknown message types", "[wire][frame]") {
  for (std::uint16_t t : {std::uint16_t{0}, std::uint16_t{bps::wire::max_msg + 1}, std::uint16_t{0xFFFF}}) {
    auto b = bps::wire::encode(distinctive(msg::push));
    set_u16(b, 6, t);
    const auto r = bps::wire::decode(b, u64_max);
    CAPTURE(t, r.reason);
    CHECK_FALSE(static_cast<bool>(r));
    CHECK(r.status == decode_status::unknown_type);
    CHECK(contains(r.reason, "type " + std::to_string(t)));
  }
  // max_msg itself is accepted
  auto b = bps::wire::encode(distinctive(msg::push));
  set_u16(b, 6, bps::wire::max_msg);
  const auto r = bps::wire::decode(b, u64_max);
  REQUIRE(r);
  CHECK(r.value.type == msg::node_failed);
}

TEST_CASE("wire header refuses payloads above the limit", "[wire][frame]") {
  header h = distinctive(msg::push);
  h.payload_bytes = 4096001;
  const auto b = bps::wire::encode(h);

  const auto over = bps::wire::decode(b, 4096000);
  CAPTURE(over.reason);
  CHECK_FALSE(static_cast<bool>(over));
  CHECK(over.status == decode_status::too_large);
  CHECK(contains(over.reason, "4096001"));
  CHECK(contains(over.reason, "4096000"));
  CHECK(contains(over.reason, "push"));

  // exactly at the limit is fine
  const auto at = bps::wire::decode(b, 4096001);
  REQUIRE(at);
  CHECK(at.value == h);

  h.payload_bytes = u64_max;
  const auto huge = bps::wire::decode(bps::wire::encode(h), 1u << 20);
  CHECK(huge.status == decode_status::too_large);
  CHECK(contains(huge.reason, std::to_string(u64_max)));
}

TEST_CASE("byte_writer and byte_reader round-trip integers and strings", "[wire][codec]") {
  bps::wire::byte_writer w;
  w.put(std::uint8_t{0xAB});
  w.put(std::int8_t{-2});
  w.put(std::uint16_t{0xBEEF});
  w.put(std::int16_t{-12345});
  w.put(std::uint32_t{0xDEADBEEF});
  w.put(std::int32_t{-1});
  w.put(std::int32_t{std::numeric_limits<std::int32_t>::min()});
  w.put(u64_max);
  w.put(std::int64_t{std::numeric_limits<std::int64_t>::min()});
  w.put_string("");
  w.put_string("hello, servers");
  const std::string with_nul("a\0b", 3);
  w.put_string(with_nul);

  // exact size: 1+1+2+2+4+4+4+8+8 + (4) + (4+14) + (4+3)
  const std::size_t expected = 1 + 1 + 2 + 2 + 4 + 4 + 4 + 8 + 8 + 4 + 18 + 7;
  REQUIRE(w.bytes().size() == expected);
  // little-endian: 0xBEEF follows the two single bytes
  CHECK(std::to_integer<int>(w.bytes()[2]) == 0xEF);
  CHECK(std::to_integer<int>(w.bytes()[3]) == 0xBE);

  const auto bytes = w.take();
  bps::wire::byte_reader r(bytes);
  CHECK(r.get<std::uint8_t>() == 0xAB);
  CHECK(r.get<std::int8_t>() == -2);
  CHECK(r.get<std::uint16_t>() == 0xBEEF);
  CHECK(r.get<std::int16_t>() == -12345);
  CHECK(r.get<std::uint32_t>() == 0xDEADBEEFu);
  CHECK(r.get<std::int32_t>() == -1);
  CHECK(r.get<std::int32_t>() == std::numeric_limits<std::int32_t>::min());
  CHECK(r.get<std::uint64_t>() == u64_max);
  CHECK(r.get<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
  CHECK(r.get_string() == "");
  CHECK_FALSE(r.done());
  CHECK(r.get_string() == "hello, servers");
  CHECK(r.get_string() == with_nul);
  CHECK(r.done());
  CHECK_THROWS_AS(r.get<std::uint8_t>(), bps::wire::decode_error);
}

TEST_CASE("byte_reader throws decode_error past the end", "[wire][codec]") {
  const std::vector<std::byte> three{std::byte{1}, std::byte{2}, std::byte{3}};
  {
    bps::wire::byte_reader r(three);
    CHECK_THROWS_AS(r.get<std::uint32_t>(), bps::wire::decode_error);
  }
  {
    bps::wire::byte_reader r(three);
    CHECK(r.get<std::uint16_t>() == 0x0201);
    CHECK_THROWS_AS(r.get<std::uint16_t>(), bps::wire::decode_error);
    // a failed read consumed nothing
    CHECK(r.get<std::uint8_t>() == 3);
    CHECK(r.done());
  }
  {
    bps::wire::byte_reader r(std::span<const std::byte>{});
    CHECK(r.done());
    CHECK_THROWS_AS(r.get<std::uint8_t>(), bps::wire::decode_error);
    CHECK_THROWS_AS(r.get_string(), bps::wire::decode_error);
  }
  {
    // a string whose declared length runs past the end
    bps::wire::byte_writer w;
    w.put(std::uint32_t{10});
    w.put(std::uint32_t{0x41414141});
    const auto b = w.take();
    bps::wire::byte_reader r(b);
    CHECK_THROWS_AS(r.get_string(), bps::wire::decode_error);
  }
}

TEST_CASE("byte_reader refuses over-long strings before reading them", "[wire][codec]") {
  bps::wire::byte_writer w;
  w.put_string(std::string(17, 'x'));
  const auto b = w.take();
  {
    bps::wire::byte_reader r(b);
    CHECK_THROWS_AS(r.get_string(16), bps::wire::decode_error);
  }
  {
    bps::wire::byte_reader r(b);
    CHECK(r.get_string(17) == std::string(17, 'x'));
    CHECK(r.done());
  }
  {
    // a hostile length of 4 GiB with no bytes behind it: refused by the limit
    bps::wire::byte_writer h;
    h.put(u32_max);
    const auto hb = h.take();
    bps::wire::byte_reader r(hb);
    try {
      r.get_string();
      FAIL("no exception");
    } catch (const bps::wire::decode_error& e) {
      CHECK(contains(e.what(), "4096"));
    }
  }
}

namespace {

bps::rendezvous::hello sample_hello() {
  bps::rendezvous::hello h;
  h.protocol = bps::rendezvous::protocol_version;
  h.node_role = bps::role::server;
  h.requested_rank = 0x7FFFFFF0;
  h.host = "server-7.cluster.example";
  h.port = 65535;
  h.partition_bytes = 0xFEDCBA9876543210ull;
  h.num_workers = 123;
  h.num_servers = 45;
  h.key_hash = "sdbm";
  return h;
}

void check_same(const bps::rendezvous::hello& a, const bps::rendezvous::hello& b) {
  CHECK(a.protocol == b.protocol);
  CHECK(a.node_role == b.node_role);
  CHECK(a.requested_rank == b.requested_rank);
  CHECK(a.host == b.host);
  CHECK(a.port == b.port);
  CHECK(a.partition_bytes == b.partition_bytes);
  CHECK(a.num_workers == b.num_workers);
  CHECK(a.num_servers == b.num_servers);
  CHECK(a.key_hash == b.key_hash);
}

bps::rendezvous::welcome sample_welcome() {
  bps::rendezvous::welcome m;
  m.rank = 3;
  m.num_workers = 8;
  m.num_servers = 3;
  m.servers = {{"10.0.0.1", 9000}, {"", 1}, {"host-with-a-longer-name.example.org", 65535}};
  return m;
}

}  // namespace

TEST_CASE("rendezvous hello round-trips", "[wire][rendezvous]") {
  const auto h = sample_hello();
  const auto bytes = bps::rendezvous::encode(h);
  // 4 + 1 + 4 + (4+24) + 2 + 8 + 4 + 4 + (4+4)
  CHECK(bytes.size() == 4 + 1 + 4 + 4 + h.host.size() + 2 + 8 + 4 + 4 + 4 + h.key_hash.size());
  check_same(bps::rendezvous::decode_hello(bytes), h);

  for (auto r : {bps::role::scheduler, bps::role::server, bps::role::worker}) {
    auto h2 = sample_hello();
    h2.node_role = r;
    h2.requested_rank = -1;
    h2.host = "";
    h2.port = 0;
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
  // unknown role byte (offset 4)
  auto bad_role = bytes;
  bad_role[4] = std::byte{3};
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bad_role), bps::wire::decode_error);
  // over-long key hash name
  auto h = sample_hello();
  h.key_hash = std::string(33, 'k');
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)), bps::wire::decode_error);
  // over-long host
  h = sample_hello();
  h.host = std::string(257, 'h');
  CHECK_THROWS_AS(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)), bps::wire::decode_error);
  h.host = std::string(256, 'h');
  CHECK(bps::rendezvous::decode_hello(bps::rendezvous::encode(h)).host == h.host);
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
  CHECK(bytes.size() == 16 + (4 + 8 + 2) + (4 + 0 + 2) + (4 + 35 + 2));
  CHECK(bps::rendezvous::decode_welcome(bytes) == m);

  bps::rendezvous::welcome empty;
  empty.rank = -1;
  const auto eb = bps::rendezvous::encode(empty);
  CHECK(eb.size() == 16);
  CHECK(bps::rendezvous::decode_welcome(eb) == empty);
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
  w.put(u32_max);
  CHECK_THROWS_AS(bps::rendezvous::decode_welcome(w.take()), bps::wire::decode_error);
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
  SECTION("key hash of a server does not matter") {
    theirs.node_role = bps::role::server;
    theirs.key_hash = "sdbm";
    CHECK_FALSE(bps::rendezvous::first_difference(mine, theirs, where).has_value());
  }
  SECTION("protocol") {
    theirs.protocol = 7;
    expect({"protocol", "speaks 7", "the scheduler speaks 1", where});
  }
  SECTION("the first difference is reported: protocol before counts") {
    theirs.protocol = 7;
    theirs.num_workers = 99;
    const auto d = bps::rendezvous::first_difference(mine, theirs, where);
    REQUIRE(d.has_value());
    CHECK(contains(*d, "protocol"));
    CHECK_FALSE(contains(*d, "DMLC_NUM_WORKER"));
  }
}
