// libFuzzer target: the frame decoder and what a server does with the frames it accepts.
//
// The input is read as a stream of frames, as a link reads it: a 64-byte header, then as many
// payload bytes as the header declares (fewer when the input ends). Each header is decoded with
// one of a few payload limits (the first input byte picks it, and whether the server state runs
// in failover mode: rank-ordered sums, held pushes, sum offers). A refused header ends the
// stream, as it ends a connection. An accepted one must re-encode to the same 64 bytes, and its
// frame is handed to what handles that type on a node: pushes and sum offers to a server's
// default request handler, sync_sum (every dtype, shape and round check, the sums themselves),
// hello and welcome payloads to the rendezvous decoders, batches (tensor fusion) split into
// their records, each handled as its frame, embedding-table requests to a server's tables
// (declares, pulls and pushes; never a save or load, which write and read files), texts to the
// message helpers. Nothing may crash, leak, read out
// of bounds or hit undefined behaviour; only wire::decode_error may be thrown.
#include <byteps/core/keys.hpp>
#include <byteps/rendezvous/messages.hpp>
#include <byteps/server/sync_sum.hpp>
#include <byteps/server/tables.hpp>
#include <byteps/wire/batch.hpp>
#include <byteps/wire/codec.hpp>
#include <byteps/wire/declare.hpp>
#include <byteps/wire/frame.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>

namespace {

using namespace bps;

constexpr int num_workers = 2;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_frame: %s\n", what);
  std::abort();
}

// Every byte of an answer must be readable.
void read_all(std::span<const std::byte> bytes) {
  volatile std::byte sink{};
  for (auto b : bytes) sink = b;
  (void)sink;
}

struct summation_server {
  explicit summation_server(bool failover) : failover(failover) {}
  bool failover;  // failover mode: rank-ordered sums, held pushes, sum offers
  detail::buffer_pool pool;
  server::sync_sum handler{Config{}, pool};

  // As Server::on_push: the server's default handler decides, and what it answers is read.
  void push(const wire::header& h, std::span<const std::byte> payload) {
    detail::buffer_pool::buffer received = pool.take(payload.size());
    if (!payload.empty()) std::memcpy(received.data.get(), payload.data(), payload.size());
    // Worker 2 does not exist: the handler must refuse it, not index past its tables.
    const int worker = static_cast<int>(h.sender % (num_workers + 1));
    const std::function<std::string()> name = [] { return std::string("'t'"); };
    const auto o = handler.handle(
        server::request{h, server::push_bytes::in(received), worker, num_workers, failover, name});
    using kind = server::outcome::kind;
    if (o.what == kind::release) {
      // The round's pushes and offers all had this push's shape, or it would have failed.
      if (o.answer.bytes.size() != payload.size()) broken("a round's sum has the wrong size");
      read_all(o.answer.bytes);
    } else if (o.what == kind::answer_now) {
      read_all(o.answer.bytes);  // a kept sum
    } else if ((o.what == kind::refuse || o.what == kind::fail_round) && o.error.empty()) {
      broken("an error without a message");
    }
    pool.give_back(std::move(received));
  }

  // As Server::on_rows: a table request, from worker 0 or 1 of a job with 2 servers (this one
  // server 0); asynchronous with staleness 0 in failover mode, so both ways are fuzzed.
  server::tables tables;
  void rows(const wire::header& h, std::span<const std::byte> payload) {
    if (payload.size() >= 2) {  // a save or load would write or read the files the input names
      const auto op = std::to_integer<std::uint8_t>(payload[1]);
      if (op == static_cast<std::uint8_t>(embedding::op::save) ||
          op == static_cast<std::uint8_t>(embedding::op::load))
        return;
    }
    const int worker = static_cast<int>(h.sender % num_workers);
    server::tables::place at{.server = 0, .servers = 2, .num_workers = num_workers,
                             .async = failover, .staleness = failover ? 0 : -1};
    try {
      const auto o = tables.handle(h, payload, {worker, 0}, at);
      using kind = server::outcome::kind;
      if (o.what == kind::refuse && o.error.empty()) broken("a table refusal without a message");
      read_all(o.answer.bytes);
      for (const auto& held : o.released) read_all(held.answer.bytes);
    } catch (const wire::decode_error&) {
    }
  }
};

void handle_frame(summation_server& server, const wire::header& h,
                  std::span<const std::byte> payload) {
  (void)wire::msg_name(h.type);
  switch (h.type) {
    case wire::msg::push:
    case wire::msg::sum_offer:
      server.push(h, payload);
      break;
    case wire::msg::rows_request:
      server.rows(h, payload);
      break;
    case wire::msg::hello:
      try {
        auto theirs = rendezvous::decode_hello(payload);
        Config c;
        auto mine = rendezvous::hello::from(c, role::scheduler);
        (void)rendezvous::first_difference(mine, theirs, "127.0.0.1:1");
      } catch (const wire::decode_error&) {
      }
      break;
    case wire::msg::welcome:
      try {
        (void)rendezvous::decode_welcome(payload);
      } catch (const wire::decode_error&) {
      }
      break;
    case wire::msg::declare:
      try {
        (void)wire::decode_declare(payload);
      } catch (const wire::decode_error&) {
      }
      break;
    case wire::msg::push_batch:  // tensor fusion: each record as the frame it is
    case wire::msg::answer_batch:
      try {
        for (const auto& r : wire::split_batch(h, payload)) {
          if (r.head.type != wire::record_type(h.type)) broken("a batch record of another type");
          if (r.payload.size() != r.head.payload_bytes) broken("a record's payload is cut");
          handle_frame(server, r.head, r.payload);
        }
      } catch (const wire::decode_error&) {
      }
      break;
    default: {
      // error, refuse, node_failed carry text; the others nothing.
      std::string text(reinterpret_cast<const char*>(payload.data()), payload.size());
      (void)text;
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 + wire::header_size) return 0;
  static constexpr std::uint64_t limits[] = {0, 64, 4096, std::uint64_t{1} << 20,
                                             std::numeric_limits<std::uint64_t>::max()};
  const std::uint64_t max_payload = limits[data[0] % std::size(limits)];
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data) + 1, size - 1);

  summation_server server((data[0] / std::size(limits)) % 2 == 1);
  while (in.size() >= wire::header_size) {
    std::span<const std::byte, wire::header_size> head(in.data(), wire::header_size);
    in = in.subspan(wire::header_size);
    auto decoded = wire::decode(head, max_payload);
    if (!decoded) {
      if (decoded.reason.empty()) broken("a refused header without a reason");
      break;  // the connection would be closed here
    }
    if (decoded.value.payload_bytes > max_payload) broken("a header over the limit was accepted");
    auto again = wire::encode(decoded.value);
    if (!std::equal(again.begin(), again.end(), head.begin())) broken("decode/encode differ");

    wire::header h = decoded.value;
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(h.payload_bytes, in.size()));
    h.payload_bytes = n;  // a link delivers exactly payload_bytes; the input may end early
    handle_frame(server, h, in.first(n));
    in = in.subspan(n);
  }
  return 0;
}
