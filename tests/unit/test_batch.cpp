#include <byteps/wire/batch.hpp>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "wire_helpers.hpp"

// Batches of tensor fusion (wire/batch.hpp): the writer's exact bytes, the split's round trip,
// and a decode_error naming the record and the fault for every malformed batch.

namespace {

using bps::wire::batch_writer;
using bps::wire::decode_error;
using bps::wire::header;
using bps::wire::msg;
using bps::wire::split_batch;
using bps_test::contains;
using bps_test::patterned_bytes;

header record(msg type, std::uint64_t key, std::uint32_t part, std::uint64_t round) {
  header h;
  h.type = type;
  h.flags = bps::wire::flag_traced;
  h.sender = 1;
  h.key = key;
  h.part = part;
  h.dtype = 3;
  h.round = round;
  h.tensor_bytes = 1000 + key;
  h.offset = 8 * part;
  return h;
}

// A push_batch of three records (3, 0 and 100 payload bytes): its frame header and payload.
struct three {
  std::vector<header> heads = {record(msg::push, 7, 0, 2), record(msg::push, 8, 1, 2),
                               record(msg::push, 9, 4, 5)};
  std::vector<std::vector<std::byte>> payloads = {patterned_bytes(3, 1), {},
                                                  patterned_bytes(100, 2)};
  header frame;
  std::vector<std::byte> bytes;
  three() {
    batch_writer w;
    for (std::size_t i = 0; i < heads.size(); ++i) w.add(heads[i], payloads[i]);
    frame = w.frame(msg::push_batch, 1);
    bytes = w.take();
  }
};

// The message of the decode_error that splitting `payload` under `frame` throws.
std::string split_error(const header& frame, std::span<const std::byte> payload) {
  try {
    (void)split_batch(frame, payload);
  } catch (const decode_error& e) {
    return e.what();
  }
  return "(no decode_error)";
}

void put_u64(std::vector<std::byte>& b, std::size_t at, std::uint64_t v) {
  for (std::size_t i = 0; i < 8; ++i) b[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

}  // namespace

TEST_CASE("batch: the writer's bytes are each record's encoded header and then its payload",
          "[wire][batch]") {
  const three t;
  CHECK(t.frame.type == msg::push_batch);
  CHECK(t.frame.sender == 1);
  CHECK(t.frame.part == 3);  // the record count
  REQUIRE(t.bytes.size() == 3 * 64 + 3 + 0 + 100);
  CHECK(t.frame.payload_bytes == t.bytes.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    header h = t.heads[i];
    h.payload_bytes = t.payloads[i].size();
    const auto encoded = bps::wire::encode(h);
    CHECK(std::vector<std::byte>(t.bytes.begin() + at, t.bytes.begin() + at + 64) ==
          std::vector<std::byte>(encoded.begin(), encoded.end()));
    at += 64;
    CHECK(std::vector<std::byte>(t.bytes.begin() + at,
                                 t.bytes.begin() + at + t.payloads[i].size()) == t.payloads[i]);
    at += t.payloads[i].size();
  }
}

TEST_CASE("batch: split gives back every record exactly, in order", "[wire][batch]") {
  const three t;
  const auto records = split_batch(t.frame, t.bytes);
  REQUIRE(records.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    header expect = t.heads[i];
    expect.payload_bytes = t.payloads[i].size();
    CHECK(records[i].head == expect);
    CHECK(std::vector<std::byte>(records[i].payload.begin(), records[i].payload.end()) ==
          t.payloads[i]);
    // A view into the batch, not a copy.
    if (!records[i].payload.empty()) CHECK(records[i].payload.data() >= t.bytes.data());
  }

  // An answer_batch carries pull_responses the same way.
  batch_writer w;
  const auto a = patterned_bytes(64, 3), b = patterned_bytes(65536, 4);
  w.add(record(msg::pull_response, 1, 0, 9), a);
  w.add(record(msg::pull_response, 2, 3, 9), b);
  const auto frame = w.frame(msg::answer_batch, 0);
  const auto payload = w.take();
  CHECK(w.records() == 0);  // taken: empty again
  const auto answers = split_batch(frame, payload);
  REQUIRE(answers.size() == 2);
  CHECK(answers[0].head.key == 1);
  CHECK(answers[1].head.part == 3);
  CHECK(answers[1].head.payload_bytes == 65536);
  CHECK(std::vector<std::byte>(answers[1].payload.begin(), answers[1].payload.end()) == b);
}

TEST_CASE("batch: the message types and their names", "[wire][batch]") {
  CHECK(static_cast<int>(msg::push_batch) == 18);
  CHECK(static_cast<int>(msg::answer_batch) == 19);
  CHECK(bps::wire::msg_name(msg::push_batch) == "push_batch");
  CHECK(bps::wire::msg_name(msg::answer_batch) == "answer_batch");
  CHECK(bps::wire::record_type(msg::push_batch) == msg::push);
  CHECK(bps::wire::record_type(msg::answer_batch) == msg::pull_response);
  CHECK(bps::wire::record_type(msg::push) == msg::push);  // not a batch
}

TEST_CASE("batch: fits() holds a batch to max_batch_bytes, record headers included",
          "[wire][batch]") {
  batch_writer w;
  const std::size_t max = bps::wire::max_batch_bytes;
  CHECK(w.fits(max - 64));
  CHECK_FALSE(w.fits(max - 63));
  w.add(record(msg::push, 1, 0, 0), patterned_bytes(1000, 0));
  CHECK(w.fits(max - 64 - 1064));
  CHECK_FALSE(w.fits(max - 64 - 1063));
}

TEST_CASE("batch: a short record names the record and where the batch ends", "[wire][batch]") {
  const three t;
  // The batch ends 10 bytes into the third record's header.
  const std::size_t third = 64 + 3 + 64;
  const auto e = split_error(t.frame, std::span(t.bytes).first(third + 10));
  CAPTURE(e);
  CHECK(contains(e, "push_batch record 2 of 3: short record"));
  CHECK(contains(e, "10 bytes into its 64-byte header"));
}

TEST_CASE("batch: an invalid record header names the record and the header's fault",
          "[wire][batch]") {
  const three t;
  auto bad = t.bytes;
  bad[64 + 3] = std::byte{'G'};  // the second record's magic
  auto e = split_error(t.frame, bad);
  CAPTURE(e);
  CHECK(contains(e, "push_batch record 1 of 3: invalid record header: bad magic"));

  bad = t.bytes;
  bad[64 + 3 + 6] = std::byte{77};  // the second record's type: unknown
  e = split_error(t.frame, bad);
  CHECK(contains(e, "push_batch record 1 of 3: invalid record header: unknown message type 77"));

  bad = t.bytes;
  bad[6] = std::byte{static_cast<unsigned char>(msg::pull_response)};  // a record of another kind
  e = split_error(t.frame, bad);
  CHECK(contains(e,
                 "push_batch record 0 of 3: a pull_response record (a push_batch carries push "
                 "records)"));
}

TEST_CASE("batch: trailing bytes after the last record are refused", "[wire][batch]") {
  const three t;
  auto longer = t.bytes;
  longer.resize(longer.size() + 5);
  const auto e = split_error(t.frame, longer);
  CAPTURE(e);
  CHECK(contains(e, "push_batch of 3 records: 5 trailing bytes after the last record"));
  // A count short of the records leaves the last record as trailing bytes too.
  header fewer = t.frame;
  fewer.part = 2;
  CHECK(contains(split_error(fewer, t.bytes), "push_batch of 2 records: 164 trailing bytes"));
}

TEST_CASE("batch: a record larger than the batch names its size and what is left",
          "[wire][batch]") {
  const three t;
  auto bad = t.bytes;
  const std::size_t third = 64 + 3 + 64;
  put_u64(bad, third + 40, 101);  // the third record's payload_bytes: one past the batch's end
  auto e = split_error(t.frame, bad);
  CAPTURE(e);
  CHECK(contains(e,
                 "push_batch record 2 of 3: record larger than the batch, it declares 101 "
                 "payload bytes but 100 bytes of the batch are left"));
  put_u64(bad, 64 + 3 + 40, ~std::uint64_t{0});  // the second's: past any frame limit too
  e = split_error(t.frame, bad);
  CHECK(contains(e,
                 "push_batch record 1 of 3: record larger than the batch, it declares "
                 "18446744073709551615 payload bytes but 164 bytes of the batch are left"));
}

TEST_CASE(
    "batch: no records, more records than the payload holds, an oversized batch, and a "
    "non-batch type",
    "[wire][batch]") {
  const three t;
  header none = t.frame;
  none.part = 0;
  CHECK(contains(split_error(none, t.bytes), "a push_batch of no records"));
  CHECK(contains(split_error(none, {}), "a push_batch of no records"));
  header many = t.frame;
  many.part = 5;
  CHECK(contains(split_error(many, t.bytes),
                 "push_batch record 3 of 5: short record, the batch ends 0 bytes into its "
                 "64-byte header"));
  std::vector<std::byte> huge(bps::wire::max_batch_bytes + 1);
  CHECK(contains(split_error(t.frame, huge), "a push_batch of 1048577 bytes (at most 1048576)"));
  header push = t.frame;
  push.type = msg::push;
  CHECK(contains(split_error(push, t.bytes), "a push frame is not a batch"));
}
