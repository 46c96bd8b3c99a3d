#include <byteps/wire/frame.hpp>
#include <byteps/wire/codec.hpp>

#include <catch2/catch.hpp>

#include "wire_helpers.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// The frame header (layout, round trip, refusals) and the byte_writer/byte_reader codec.

namespace {

using bps::wire::decode_status;
using bps::wire::header;
using bps::wire::msg;
using bps_test::contains;
using bps_test::u32_max;
using bps_test::u64_max;

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
  CHECK(r.value.type == msg::membership_ack);  // the newest type
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
