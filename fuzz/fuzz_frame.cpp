// libFuzzer target: the frame decoder and what a server does with the frames it accepts.
//
// The input is read as a stream of frames, as a link reads it: a 64-byte header, then as many
// payload bytes as the header declares (fewer when the input ends). Each header is decoded with
// one of a few payload limits (the first input byte picks it, and whether the server state runs
// in failover mode: rank-ordered sums, held pushes, sum offers). A refused header ends the
// stream, as it ends a connection. An accepted one must re-encode to the same 64 bytes, and its
// frame is handed to what handles that type on a node: pushes and sum offers to a server's per-key summation
// state (every dtype, shape and round check, the sums themselves), hello and welcome payloads
// to the rendezvous decoders, texts to the message helpers. Nothing may crash, leak, read out
// of bounds or hit undefined behaviour; only wire::decode_error may be thrown.
#include <byteps/core/keys.hpp>
#include <byteps/rendezvous/messages.hpp>
#include <byteps/server/key_state.hpp>
#include <byteps/wire/codec.hpp>
#include <byteps/wire/frame.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

namespace {

using namespace bps;

struct waiter {};  // a server's per-worker session, for key_state

constexpr int num_workers = 2;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_frame: %s\n", what);
  std::abort();
}

struct summation_server {
  explicit summation_server(bool failover) : failover(failover) {}
  bool failover;  // failover mode: rank-ordered sums, held pushes, sum offers
  detail::buffer_pool pool;
  std::unordered_map<key_id, server::key_state<waiter>, key_id_hash> keys;
  std::shared_ptr<waiter> sessions[num_workers + 1] = {std::make_shared<waiter>(),
                                                       std::make_shared<waiter>(),
                                                       std::make_shared<waiter>()};

  // As Server::on_push: accept (or take a failover sum_offer), and when every worker pushed,
  // finish the round.
  void push(const wire::header& h, std::span<const std::byte> payload) {
    detail::buffer_pool::buffer received{std::make_unique_for_overwrite<std::byte[]>(payload.size()),
                                         payload.size()};
    if (!payload.empty()) std::memcpy(received.data.get(), payload.data(), payload.size());
    // Worker 2 does not exist: the state must refuse it, not index past its tables.
    const int worker = static_cast<int>(h.sender % (num_workers + 1));
    auto& k = keys.try_emplace(key_id{h.key, h.part}, pool, failover).first->second;
    auto name = [&] { return std::string("'t'"); };
    if (h.type == wire::msg::sum_offer) {
      bool completes = false;
      auto problem = k.offer(h, received, worker, num_workers, completes, name);
      if (problem.empty() && completes) finish(k);
      return;
    }
    if (failover && k.initialized())
      if (auto previous = k.previous_sum(h.round)) {
        volatile std::byte sink{};
        for (auto b : *previous) sink = b;  // a kept sum must be readable
        (void)sink;
        return;
      }
    auto problem = k.accept(h, received, worker, num_workers, name);
    if (!problem.empty()) return;
    k.waiting.push_back(sessions[worker]);
    if (static_cast<int>(k.waiting.size()) < num_workers) return;
    finish(k);
  }

  void finish(server::key_state<waiter>& k) {
    if (k.round_error.empty()) {
      auto sum = k.finish_round();
      if (sum.size() != k.bytes) broken("a round's sum has the wrong size");
      volatile std::byte sink{};
      for (auto b : sum) sink = b;  // every byte of the sum must be readable
      (void)sink;
    }
    k.next_round();
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
    default: {
      // declare, error, refuse, node_failed carry text; the others nothing.
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
