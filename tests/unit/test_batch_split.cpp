#include <byteps/server/batch_split.hpp>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "wire_helpers.hpp"

// A server's side of tensor fusion (server/batch_split.hpp), against a stand-in session: each
// record of a push_batch is asked a place and handed over as its own push frame, in order and
// byte for byte; the answers made meanwhile go back as one answer_batch per worker (a lone one
// as a pull_response), also when a record is refused; a refusal names the record.

namespace {

using bps::wire::header;
using bps::wire::msg;
using bps_test::contains;
using bps_test::patterned_bytes;

struct sent_frame {
  header head;
  std::vector<std::byte> payload;
};

struct fake_link {
  std::vector<sent_frame> frames;
  void send(const header& h, std::span<const std::byte> p, const std::function<void()>& done) {
    header c = h;
    c.payload_bytes = p.size();
    frames.push_back({c, {p.begin(), p.end()}});
    if (done) done();
  }
};

// What take_push_batch and answer_batches ask of a session.
struct fake_session {
  std::shared_ptr<fake_link> link = std::make_shared<fake_link>();
  bps::server::answer_batches<fake_session>* batching = nullptr;
  std::vector<sent_frame> pushes;              // the frames handed over, as on_message saw them
  std::uint64_t refused_key = ~0ull;           // payload_destination refuses this key's push
  std::function<void(const header&)> on_push;  // what the "server" does with each push
  std::vector<std::byte> place;

  std::span<std::byte> payload_destination(const header& h, std::string& reason) {
    if (h.key == refused_key) {
      reason = "a push of a refused key";
      return {};
    }
    place.assign(h.payload_bytes, std::byte{0xee});
    return place;
  }
  void on_message(const header& h, std::span<std::byte> payload) {
    pushes.push_back({h, {payload.begin(), payload.end()}});
    if (on_push) on_push(h);
  }
};

header push(std::uint64_t key, std::uint32_t part) {
  header h;
  h.type = msg::push;
  h.sender = 1;
  h.key = key;
  h.part = part;
  h.round = 4;
  h.tensor_bytes = 4096;
  return h;
}

struct batch {
  header frame;
  std::vector<std::byte> bytes;
  std::vector<std::vector<std::byte>> payloads;
};

batch three_pushes() {
  batch b;
  b.payloads = {patterned_bytes(12, 1), patterned_bytes(40, 2), patterned_bytes(8, 3)};
  bps::wire::batch_writer w;
  for (std::uint32_t i = 0; i < 3; ++i) w.add(push(10 + i, i), b.payloads[i]);
  b.frame = w.frame(msg::push_batch, 1);
  b.bytes = w.take();
  return b;
}

// The answer the "server" makes for a push: 16 bytes that name its key.
struct answer_of {
  std::vector<std::byte> bytes;
  bps::server::reply r;
  explicit answer_of(const header& h) : bytes(patterned_bytes(16, static_cast<int>(h.key))) {
    r.bytes = bytes;
    r.round = h.round;
    r.type = bps::dtype::float32;
    r.offset = 64;
    r.tensor_bytes = h.tensor_bytes;
  }
};

}  // namespace

TEST_CASE("batch split: each record reaches the session as its push frame, exactly and in order",
          "[server][batch]") {
  auto s = std::make_shared<fake_session>();
  const auto b = three_pushes();
  bps::server::take_push_batch(*s, b.frame, b.bytes, 65536);
  REQUIRE(s->pushes.size() == 3);
  for (std::uint32_t i = 0; i < 3; ++i) {
    header expect = push(10 + i, i);
    expect.payload_bytes = b.payloads[i].size();
    CHECK(s->pushes[i].head == expect);
    CHECK(s->pushes[i].payload == b.payloads[i]);
  }
  CHECK(s->batching == nullptr);
  CHECK(s->link->frames.empty());  // nothing was answered
}

TEST_CASE(
    "batch split: answers made meanwhile go back as one answer_batch per worker, a lone "
    "one as its pull_response",
    "[server][batch]") {
  auto s = std::make_shared<fake_session>();
  auto other = std::make_shared<fake_session>();
  std::vector<std::unique_ptr<answer_of>> made;
  s->on_push = [&](const header& h) {
    REQUIRE(s->batching != nullptr);
    made.push_back(std::make_unique<answer_of>(h));
    // Keys 10 and 12 answer this worker, key 11 the other one.
    CHECK(s->batching->add(h.key == 11 ? other : s, h, made.back()->r));
    CHECK(s->link->frames.empty());  // held until the batch is done
  };
  const auto b = three_pushes();
  bps::server::take_push_batch(*s, b.frame, b.bytes, 65536);

  REQUIRE(s->link->frames.size() == 1);
  const auto& fused = s->link->frames[0];
  CHECK(fused.head.type == msg::answer_batch);
  CHECK(fused.head.part == 2);
  const auto records = bps::wire::split_batch(fused.head, fused.payload);
  REQUIRE(records.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& a = *made[i == 0 ? 0 : 2];
    header expect = bps::server::pull_response_header(push(10 + 2 * i, 2 * i), a.r, 0);
    expect.payload_bytes = 16;
    CHECK(records[i].head == expect);
    CHECK(std::vector<std::byte>(records[i].payload.begin(), records[i].payload.end()) == a.bytes);
  }

  REQUIRE(other->link->frames.size() == 1);
  const auto& lone = other->link->frames[0];
  header expect = bps::server::pull_response_header(push(11, 1), made[1]->r, 0);
  expect.payload_bytes = 16;
  CHECK(lone.head == expect);
  CHECK(lone.payload == made[1]->bytes);
}

TEST_CASE("batch split: a refused record names itself, and the answers made before it still go",
          "[server][batch]") {
  auto s = std::make_shared<fake_session>();
  s->refused_key = 11;
  std::vector<std::unique_ptr<answer_of>> made;
  s->on_push = [&](const header& h) {
    made.push_back(std::make_unique<answer_of>(h));
    s->batching->add(s, h, made.back()->r);
  };
  const auto b = three_pushes();
  try {
    bps::server::take_push_batch(*s, b.frame, b.bytes, 65536);
    FAIL("no decode_error");
  } catch (const bps::wire::decode_error& e) {
    CHECK(std::string(e.what()) == "push_batch record 1 of 3 refused: a push of a refused key");
  }
  CHECK(s->pushes.size() == 1);  // the records after the refused one are not handled
  CHECK(s->batching == nullptr);
  REQUIRE(s->link->frames.size() == 1);
  CHECK(s->link->frames[0].head.type == msg::pull_response);
  CHECK(s->link->frames[0].head.key == 10);
  CHECK(s->link->frames[0].payload == made[0]->bytes);
}

TEST_CASE("batch split: a malformed batch is refused before any record is handled",
          "[server][batch]") {
  auto s = std::make_shared<fake_session>();
  auto b = three_pushes();
  b.bytes.push_back(std::byte{0});
  CHECK_THROWS_WITH(bps::server::take_push_batch(*s, b.frame, b.bytes, 65536),
                    Catch::Contains("1 trailing bytes after the last record"));
  CHECK(s->pushes.empty());
  CHECK(s->batching == nullptr);
}

TEST_CASE("batch split: answers above BYTEPS_FUSION_BYTES, or any with fusion off, go alone",
          "[server][batch]") {
  auto s = std::make_shared<fake_session>();
  answer_of a(push(10, 0));
  {
    bps::server::answer_batches<fake_session> answers(16);
    CHECK(answers.add(s, push(10, 0), a.r));  // 16 bytes: at the threshold, joins
    bps::server::answer_batches<fake_session> smaller(15);
    CHECK_FALSE(smaller.add(s, push(10, 0), a.r));
    bps::server::answer_batches<fake_session> off(0);
    CHECK_FALSE(off.add(s, push(10, 0), a.r));
    answers.flush();
  }
  REQUIRE(s->link->frames.size() == 1);
  CHECK(s->link->frames[0].head.type == msg::pull_response);
}

TEST_CASE("batch split: a worker's answers past one batch's bytes go in several batches",
          "[server][batch]") {
  auto s = std::make_shared<fake_session>();
  const std::vector<std::byte> big(262144, std::byte{7});
  bps::server::reply r;
  r.bytes = big;
  bps::server::answer_batches<fake_session> answers(262144);
  for (std::uint32_t i = 0; i < 5; ++i) CHECK(answers.add(s, push(20, i), r));
  answers.flush();
  // (64 + 262144) x 4 > 1 MiB: three fit in one batch, the other two in the next.
  REQUIRE(s->link->frames.size() == 2);
  CHECK(s->link->frames[0].head.type == msg::answer_batch);
  CHECK(s->link->frames[0].head.part == 3);
  CHECK(s->link->frames[1].head.part == 2);
  CHECK(bps::wire::split_batch(s->link->frames[1].head, s->link->frames[1].payload)[1].head.part ==
        4);
}
