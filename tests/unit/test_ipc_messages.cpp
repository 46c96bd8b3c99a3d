// transport::ipc's control payloads (transport/ipc/ipc_messages.hpp): each decodes to what was
// encoded, and a payload cut short or with bytes past its end is a decode_error naming the frame.
#include <catch2/catch.hpp>

#include "byteps/transport/ipc/ipc_messages.hpp"

using namespace bps;
using namespace bps::transport::ipc_detail;

TEST_CASE("ipc messages: every control payload decodes to what was encoded", "[ipc][wire]") {
  const auto offer = decode_ring_offer(encode(ring_offer{
      .name = "/bps-ipc-12-00ab", .bytes = 1u << 26, .fingerprint = 0x0123456789abcdefull}));
  CHECK(offer.name == "/bps-ipc-12-00ab");
  CHECK(offer.bytes == (1u << 26));
  CHECK(offer.fingerprint == 0x0123456789abcdefull);

  const auto place = decode_ring_place(encode(ring_place{.pos = (1ull << 40) + 64, .bytes = 4096}));
  CHECK(place.pos == (1ull << 40) + 64);
  CHECK(place.bytes == 4096);

  const auto share = decode_share_offer(
      encode(share_offer{.id = 7, .name = "/bps-host-1-2", .bytes = 3ull << 30}));
  CHECK(share.id == 7);
  CHECK(share.name == "/bps-host-1-2");
  CHECK(share.bytes == (3ull << 30));

  CHECK(decode_share_accept(encode(share_accept{.id = 9})).id == 9);

  const auto shared =
      decode_shared_payload(encode(shared_payload{.id = 3, .offset = 128, .bytes = 65536}));
  CHECK(shared.id == 3);
  CHECK(shared.offset == 128);
  CHECK(shared.bytes == 65536);
}

TEST_CASE("ipc messages: a payload cut short or too long is refused, naming the frame",
          "[ipc][wire]") {
  auto bytes = encode(shared_payload{.id = 3, .offset = 128, .bytes = 65536});
  const auto cut = std::span<const std::byte>(bytes).first(bytes.size() - 1);
  CHECK_THROWS_AS(decode_shared_payload(cut), wire::decode_error);
  bytes.push_back(std::byte{0});
  CHECK_THROWS_WITH(decode_shared_payload(bytes), Catch::Contains("an ipc_shared_payload"));
  CHECK_THROWS_AS(decode_ring_place({}), wire::decode_error);
  auto offer = encode(ring_offer{.name = std::string(300, 'x'), .bytes = 1, .fingerprint = 2});
  CHECK_THROWS_WITH(decode_ring_offer(offer), Catch::Contains("longer than 255"));
}
