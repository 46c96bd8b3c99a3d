#include <byteps/worker/fusion.hpp>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

// A worker's side of tensor fusion (worker/fusion.hpp): which partitions join, what is held per
// server until a flush, a batch never past max_batch_bytes, and fuse()'s batch exactly.

namespace {

using bps::worker::held_push;
using bps::worker::push_fusion;

bps::Config with_fusion(std::size_t bytes) {
  bps::Config c;
  c.fusion_bytes = bytes;
  return c;
}

held_push held(std::uint64_t key, std::span<const std::byte> payload) {
  held_push p;
  p.head.type = bps::wire::msg::push;
  p.head.key = key;
  p.head.sender = 1;
  p.payload = payload;
  p.member.op = std::make_shared<bps::detail::op_state>();
  p.member.bytes = payload.size();
  p.member.id = bps::key_id{key, static_cast<std::uint32_t>(key)};
  return p;
}

// What flushes sent: (server, the keys of its pushes), in order.
struct flushes {
  std::vector<std::pair<int, std::vector<std::uint64_t>>> sent;
  auto sender() {
    return [this](int server, std::vector<held_push>&& pushes) {
      std::vector<std::uint64_t> keys;
      for (const auto& p : pushes) keys.push_back(p.head.key);
      sent.emplace_back(server, std::move(keys));
    };
  }
};

}  // namespace

TEST_CASE(
    "fusion: uncompressed tensors of one partition up to BYTEPS_FUSION_BYTES join, and 0 turns "
    "it off",
    "[worker][fusion]") {
  bps::worker::tensor plain;
  plain.parts = {{0, 65536}};
  push_fusion f(with_fusion(65536), false);
  CHECK(f.joins(plain, 1));
  CHECK(f.joins(plain, 65536));
  CHECK_FALSE(f.joins(plain, 65537));
  bps::worker::tensor compressed;
  compressed.parts = plain.parts;
  compressed.codecs.push_back(nullptr);  // a compressor per partition: the payload is encoded
  CHECK_FALSE(f.joins(compressed, 1));
  // A tensor spread over the servers in small partitions: each goes alone, summed as it comes.
  bps::worker::tensor spread;
  spread.parts = {{0, 65536}, {65536, 65536}};
  CHECK_FALSE(f.joins(spread, 65536));
  push_fusion off(with_fusion(0), false);
  CHECK_FALSE(off.joins(plain, 1));
  // A transport that writes pushes into the server's registered memory (RDMA) never fuses.
  push_fusion registering(with_fusion(65536), true);
  CHECK_FALSE(registering.joins(plain, 1));
}

TEST_CASE(
    "fusion: pushes are held per server until flushed, and a flush of one server leaves "
    "the others",
    "[worker][fusion]") {
  push_fusion f(with_fusion(65536), false);
  const std::vector<std::byte> small(100);
  flushes out;
  f.hold(1, held(10, small), out.sender());
  f.hold(0, held(11, small), out.sender());
  f.hold(1, held(12, small), out.sender());
  CHECK(out.sent.empty());
  f.flush(1, out.sender());
  f.flush(1, out.sender());  // nothing held any more
  f.flush(7, out.sender());  // a server never held for
  REQUIRE(out.sent.size() == 1);
  CHECK(out.sent[0] == std::pair<int, std::vector<std::uint64_t>>{1, {10, 12}});
  f.flush_all(out.sender());
  REQUIRE(out.sent.size() == 2);
  CHECK(out.sent[1] == std::pair<int, std::vector<std::uint64_t>>{0, {11}});
  f.flush_all(out.sender());
  CHECK(out.sent.size() == 2);
}

TEST_CASE("fusion: what would pass max_batch_bytes goes first, so no batch is larger",
          "[worker][fusion]") {
  push_fusion f(with_fusion(bps::Config::max_fusion_bytes), false);
  const std::vector<std::byte> big(bps::Config::max_fusion_bytes);
  flushes out;
  for (std::uint64_t k = 0; k < 5; ++k) f.hold(0, held(k, big), out.sender());
  // (64 + 262144) x 4 > 1 MiB: the first three went when the fourth came.
  REQUIRE(out.sent.size() == 1);
  CHECK(out.sent[0].second == std::vector<std::uint64_t>{0, 1, 2});
  f.flush_all(out.sender());
  REQUIRE(out.sent.size() == 2);
  CHECK(out.sent[1].second == std::vector<std::uint64_t>{3, 4});
}

TEST_CASE("fusion: fuse() copies each push and its payload into one push_batch",
          "[worker][fusion]") {
  std::vector<std::byte> a(3), b(70000);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::byte>(i + 1);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i * 7);
  const std::vector<held_push> pushes = {held(5, a), held(6, b)};
  const auto batch = push_fusion::fuse(pushes, 3);
  CHECK(batch->head.type == bps::wire::msg::push_batch);
  CHECK(batch->head.sender == 3);
  CHECK(batch->head.part == 2);
  CHECK(batch->bytes.size() == 64 + 3 + 64 + 70000);
  REQUIRE(batch->members.size() == 2);
  CHECK(batch->members[0].op == pushes[0].member.op);
  CHECK(batch->members[1].id.part == 6);
  CHECK(batch->members[1].bytes == 70000);
  const auto records = bps::wire::split_batch(batch->head, batch->bytes);
  REQUIRE(records.size() == 2);
  CHECK(records[0].head.key == 5);
  CHECK(records[0].head.payload_bytes == 3);
  CHECK(std::vector<std::byte>(records[0].payload.begin(), records[0].payload.end()) == a);
  CHECK(std::vector<std::byte>(records[1].payload.begin(), records[1].payload.end()) == b);
}
