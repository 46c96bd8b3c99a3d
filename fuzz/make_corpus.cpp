// Writes the seed corpus of the fuzz targets: valid encodings made by byteps's own encoders,
// and a few malformed ones next to them. Run from the repository root:
//   build-fuzz/fuzz/byteps_fuzz_make_corpus fuzz/corpus
// It rewrites the files it owns (named valid-* and bad-*) and leaves any others alone, so
// inputs that libFuzzer found and someone kept survive a rerun.
#include <byteps/core/dtype.hpp>
#include <byteps/rendezvous/messages.hpp>
#include <byteps/worker/join_state.hpp>
#include <byteps/wire/batch.hpp>
#include <byteps/wire/codec.hpp>
#include <byteps/wire/declare.hpp>
#include <byteps/embedding/messages.hpp>
#include <byteps/embedding/placement.hpp>
#include <byteps/wire/frame.hpp>

#include "script.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace bps;
using bytes = std::vector<std::byte>;

void write(const std::filesystem::path& dir, const std::string& name, const bytes& b) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

void append(bytes& out, const bytes& more) { out.insert(out.end(), more.begin(), more.end()); }

bytes frame(wire::header h, const bytes& payload) {
  h.payload_bytes = payload.size();
  auto head = wire::encode(h);
  bytes out(head.begin(), head.end());
  append(out, payload);
  return out;
}

template <class T>
bytes values(std::initializer_list<T> v) {
  bytes out(v.size() * sizeof(T));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

bytes text(std::string_view s) {
  auto b = wire::as_bytes(s);
  return {b.begin(), b.end()};
}

wire::header push(std::uint32_t sender, dtype t, std::uint64_t round, std::uint64_t tensor_bytes) {
  wire::header h;
  h.type = wire::msg::push;
  h.sender = sender;
  h.key = 0x5eed;
  h.dtype = static_cast<std::uint32_t>(t);
  h.round = round;
  h.tensor_bytes = tensor_bytes;
  return h;
}

rendezvous::hello a_hello() {
  Config c;
  c.num_workers = 2;
  c.num_servers = 2;
  auto h = rendezvous::hello::from(c, role::server);
  h.host = "10.0.0.7";
  h.port = 9000;
  return h;
}

rendezvous::welcome a_welcome() {
  rendezvous::welcome w;
  w.rank = 1;
  w.num_workers = 2;
  w.num_servers = 2;
  w.global_rank = 3;
  w.global_size = 5;
  w.slices = 3;
  w.job_id = 0x0123456789abcdefull;
  w.servers = {{"10.0.0.7", 9000}, {"server-b.example", 9001}};
  return w;
}

void frames(const std::filesystem::path& dir) {
  // The first byte picks the payload limit in fuzz_frame (3: 1 MiB).
  const bytes limit{std::byte{3}};
  auto with_limit = [&](std::initializer_list<bytes> parts) {
    bytes out = limit;
    for (const auto& p : parts) append(out, p);
    return out;
  };
  wire::header hi;
  hi.type = wire::msg::peer_hello;
  wire::header declare;
  declare.type = wire::msg::declare;
  declare.key = 0x5eed;
  auto f32a = values<float>({1.0f, 2.5f, -3.0f, 4.0f});
  auto f32b = values<float>({0.5f, 0.5f, 0.5f, 0.5f});
  write(dir, "valid-two-workers-f32-two-rounds",
        with_limit({frame(hi, bytes(32, std::byte{0x5a})), frame(declare, wire::encode_declare({"layer0.weight", {}})),
                    frame(push(0, dtype::float32, 0, 16), f32a), frame(push(1, dtype::float32, 0, 16), f32b),
                    frame(push(1, dtype::float32, 1, 16), f32a), frame(push(0, dtype::float32, 1, 16), f32b)}));
  auto h16 = values<std::uint16_t>({0x3c00, 0x4000, 0x7bff, 0xfc00});  // 1, 2, max, -inf
  write(dir, "valid-two-workers-f16",
        with_limit({frame(push(0, dtype::float16, 0, 8), h16), frame(push(1, dtype::float16, 0, 8), h16)}));
  auto bf = values<std::uint16_t>({0x3f80, 0x7f80, 0x7fc0, 0x0001});  // 1, inf, nan, tiny
  write(dir, "valid-two-workers-bf16",
        with_limit({frame(push(0, dtype::bfloat16, 0, 8), bf), frame(push(1, dtype::bfloat16, 0, 8), bf)}));
  auto i32 = values<std::int32_t>({0x7fffffff, -1, 0, 42});
  write(dir, "valid-two-workers-int32-wraps",
        with_limit({frame(push(0, dtype::int32, 0, 16), i32), frame(push(1, dtype::int32, 0, 16), i32)}));
  auto i64 = values<std::int64_t>({0x7fffffffffffffffLL, 1});
  write(dir, "valid-two-workers-int64-wraps",
        with_limit({frame(push(0, dtype::int64, 0, 16), i64), frame(push(1, dtype::int64, 0, 16), i64)}));
  // Tensor fusion: each worker's pushes of two keys in one push_batch (push() has key 0x5eed).
  auto batch_of = [&](std::uint32_t sender, const bytes& v) {
    wire::batch_writer w;
    auto h = push(sender, dtype::float32, 0, 16);
    w.add(h, v);
    h.key = 0x5eef;
    w.add(h, v);
    const auto head = w.frame(wire::msg::push_batch, sender);
    return frame(head, w.take());
  };
  write(dir, "valid-push-batch-two-workers", with_limit({batch_of(0, f32a), batch_of(1, f32b)}));
  auto trailing = batch_of(1, f32b);
  trailing.push_back(std::byte{0});
  wire::detail::put_le<std::uint64_t>(trailing.data() + 40, (trailing.size() - 64));
  write(dir, "bad-push-batch-trailing-byte", with_limit({batch_of(0, f32a), trailing}));
  write(dir, "bad-push-twice-in-one-round",
        with_limit({frame(push(0, dtype::float32, 0, 16), f32a), frame(push(0, dtype::float32, 0, 16), f32a)}));
  write(dir, "bad-push-shapes-differ",
        with_limit({frame(push(0, dtype::float32, 0, 16), f32a),
                    frame(push(1, dtype::float64, 0, 16), values<double>({1.0, 2.0}))}));
  write(dir, "bad-push-wrong-round", with_limit({frame(push(0, dtype::int8, 7, 4), values<std::int8_t>({1, 2, 3, 4}))}));
  write(dir, "bad-push-unknown-dtype", with_limit({frame(push(0, static_cast<dtype>(99), 0, 4), text("abcd"))}));
  write(dir, "bad-push-partial-element", with_limit({frame(push(1, dtype::float64, 0, 8), text("12345"))}));

  wire::header hello_head;
  hello_head.type = wire::msg::hello;
  // Embedding tables: a declare, a pull, both workers' pushes of round 1 and a pull again.
  {
    table_spec spec;
    spec.name = "emb";
    spec.rows = 100;
    spec.dim = 2;
    spec.optimizer = "adam:lr=0.1";
    spec.init_scale = 0.5;
    auto rows = [&](std::uint32_t sender, std::uint64_t round) {
      wire::header h;
      h.type = wire::msg::rows_request;
      h.sender = sender;
      h.key = embedding::table_key("emb");
      h.round = round;
      return h;
    };
    // Ids 0..99 that server 0 of 2 holds.
    std::vector<std::uint64_t> ids;
    for (std::uint64_t id = 0; id < 100 && ids.size() < 3; ++id)
      if (embedding::row_server(embedding::table_key("emb"), id, 2) == 0) ids.push_back(id);
    auto request = [&](embedding::op o, bool grads) {
      auto b = embedding::request_buffer(o, ids.size(), grads ? ids.size() * 8 : 0);
      for (std::size_t i = 0; i < ids.size(); ++i)
        wire::detail::put_le<std::uint64_t>(b.data() + embedding::request_head_bytes + 8 * i, ids[i]);
      for (std::size_t i = 0; grads && i < ids.size() * 2; ++i) {
        const float g = 0.25f * static_cast<float>(i + 1);
        std::memcpy(b.data() + embedding::request_head_bytes + 8 * ids.size() + 4 * i, &g, 4);
      }
      return bytes(b.begin(), b.end());
    };
    const auto call = embedding::call_round_bit;
    const auto declared = embedding::encode_declare(spec);
    write(dir, "valid-table-declare-pull-push",
          with_limit({frame(rows(0, call | 1), bytes(declared.begin(), declared.end())),
                      frame(rows(0, call | 2), request(embedding::op::pull, false)),
                      frame(rows(0, 1), request(embedding::op::push, true)),
                      frame(rows(1, 1), request(embedding::op::push, true)),
                      frame(rows(1, call | 3), request(embedding::op::pull, false))}));
    write(dir, "bad-table-push-before-declare",
          with_limit({frame(rows(0, 1), request(embedding::op::push, true))}));
  }
  write(dir, "valid-hello", with_limit({frame(hello_head, rendezvous::encode(a_hello()))}));
  wire::header welcome_head;
  welcome_head.type = wire::msg::welcome;
  write(dir, "valid-welcome", with_limit({frame(welcome_head, rendezvous::encode(a_welcome()))}));
  wire::header error_head;
  error_head.type = wire::msg::error;
  error_head.flags = wire::flag_fatal;
  write(dir, "valid-error", with_limit({frame(error_head, text("server 0 at 10.0.0.7:9000: worker 1 disconnected"))}));
  wire::header bye;
  bye.type = wire::msg::bye;
  write(dir, "valid-bye", with_limit({frame(bye, {})}));

  wire::header any;
  any.type = wire::msg::push;
  auto bad = frame(any, {});
  bad[0] = std::byte{'G'};  // bad magic
  write(dir, "bad-magic", with_limit({bad}));
  bad = frame(any, {});
  bad[4] = std::byte{2};  // a future format version
  write(dir, "bad-version", with_limit({bad}));
  bad = frame(any, {});
  bad[6] = std::byte{0xff};  // unknown type
  write(dir, "bad-type", with_limit({bad}));
  any.payload_bytes = std::uint64_t{1} << 40;
  auto huge = wire::encode(any);  // declares a terabyte
  write(dir, "bad-too-large", with_limit({bytes(huge.begin(), huge.end())}));
  auto cut = frame(push(0, dtype::float32, 0, 16), f32a);
  cut.resize(cut.size() - 3);  // the payload ends early
  write(dir, "bad-truncated-payload", with_limit({cut}));
}

void rendezvous_payloads(const std::filesystem::path& dir) {
  auto h = rendezvous::encode(a_hello());
  auto w = rendezvous::encode(a_welcome());
  write(dir, "valid-hello", h);
  write(dir, "valid-welcome", w);
  rendezvous::welcome none;
  write(dir, "valid-welcome-no-servers", rendezvous::encode(none));
  auto worker = a_hello();
  worker.node_role = role::worker;
  worker.requested_rank = 1;
  worker.host.clear();
  write(dir, "valid-hello-worker", rendezvous::encode(worker));
  auto local = worker;
  local.local_rank = 2;
  local.local_size = 3;
  write(dir, "valid-hello-local-rank", rendezvous::encode(local));
  rendezvous::server_replaced moved;
  moved.rank = 1;
  moved.where = {"10.0.0.9", 9001};
  write(dir, "valid-server-replaced", rendezvous::encode(moved));
  const rendezvous::membership members{3, {0, 1, 3}, {1, 2, 1}, 4, 2, "disconnected (end of file)",
                                       true};
  write(dir, "valid-membership", rendezvous::encode(members));
  auto unordered = members;
  unordered.members = {1, 0};
  write(dir, "bad-membership-not-ascending", rendezvous::encode(unordered));
  auto joined = members;
  joined.removed = -1;
  joined.lost = false;
  joined.joined = 3;
  joined.boundary = 41;
  write(dir, "valid-membership-join", rendezvous::encode(joined));
  worker::job_state state;
  state.boundaries = 41;
  state.barriers = 2;
  state.rounds = {{0x1234, 40}, {0xFEED, 3}};
  state.tensors = {{"params.0.weight", std::vector<std::byte>(12, std::byte{7})}};
  state.extra = std::vector<std::byte>(5, std::byte{1});
  write(dir, "valid-job-state", worker::encode(state));

  auto b = h;
  b.resize(b.size() - 1);
  write(dir, "bad-hello-truncated", b);
  b = h;
  b.push_back(std::byte{0});
  write(dir, "bad-hello-trailing-byte", b);
  b = h;
  b[4] = std::byte{7};  // role 7
  write(dir, "bad-hello-role", b);
  b = h;
  b[0] = std::byte{2};  // protocol 2: the rest is not read
  write(dir, "bad-hello-protocol", b);
  b = h;
  b[9] = b[10] = b[11] = b[12] = std::byte{0xff};  // host length 4 GiB
  write(dir, "bad-hello-string-length", b);
  b = w;
  b[12] = b[13] = b[14] = b[15] = std::byte{0xff};  // 4 billion servers
  write(dir, "bad-welcome-server-count", b);
  b = w;
  b.resize(20);
  write(dir, "bad-welcome-truncated", b);
}

// The payload of a push_batch from `machine` (wire/batch.hpp): a push of 4 floats for round 0
// of each key in `keys` (script.hpp's keys), the values `v`.
bytes push_batch_payload(std::uint32_t machine, std::initializer_list<std::uint64_t> keys,
                         std::span<const float> v) {
  wire::batch_writer w;
  for (const auto key : keys) {
    wire::header h;
    h.type = wire::msg::push;
    h.sender = machine;
    h.key = key;
    h.dtype = static_cast<std::uint32_t>(dtype::float32);
    h.tensor_bytes = v.size_bytes();
    w.add(h, std::as_bytes(v));
  }
  return w.take();
}

// Tensor fusion's push_batch frames (script.hpp's `frame` op, type 18, p = the record count),
// each under 240 bytes (a direct length selector): two workers' batches that sum, and batches
// that break the format or carry a push the session must refuse.
void push_batches(const std::filesystem::path& dir) {
  using fuzzing::proof_kind;
  using fuzzing::script_writer;
  const float a[] = {1.0f, 2.5f, -3.0f, 4.0f};
  const float b[] = {0.5f, 0.5f, 0.5f, 0.5f};
  const auto k0 = fuzzing::keys[0], k1 = fuzzing::keys[1];
  auto with = [](std::uint8_t c, std::uint8_t count, const bytes& payload) {
    return [=](script_writer& w) {
      w.frame(c, 18, 0, c, 0, count, 0, 0, static_cast<std::uint8_t>(payload.size()), payload);
    };
  };
  auto two_workers = [&](auto first, auto second) {
    script_writer w(0);
    w.open().open().hello(0, proof_kind::right, 0, 0).hello(1, proof_kind::right, 1, 0);
    first(w);
    second(w);
    return w.bytes();
  };
  const auto ok0 = push_batch_payload(0, {k0, k1}, a), ok1 = push_batch_payload(1, {k0, k1}, b);
  write(dir, "valid-push-batch-two-workers", two_workers(with(0, 2, ok0), with(1, 2, ok1)));
  // One worker's pushes in a batch, the other's alone: the answers still sum.
  write(dir, "valid-push-batch-and-plain-pushes",
        two_workers(with(0, 2, ok0), [&](script_writer& w) {
          w.push(1, 0, 0, 0, std::span<const float>(b)).push(1, 1, 0, 0, std::span<const float>(b));
        }));
  auto trailing = ok1;
  trailing.push_back(std::byte{0});
  write(dir, "bad-push-batch-trailing-byte", two_workers(with(0, 2, ok0), with(1, 2, trailing)));
  write(dir, "bad-push-batch-short-record",
        two_workers(with(0, 2, ok0), with(1, 2, bytes(ok1.begin(), ok1.begin() + 100))));
  write(dir, "bad-push-batch-count", two_workers(with(0, 2, ok0), with(1, 3, ok1)));
  write(dir, "bad-push-batch-no-records", two_workers(with(0, 2, ok0), with(1, 0, {})));
  auto bad_magic = ok1;
  bad_magic[80] = std::byte{'X'};  // the second record's header starts at 64 + 16
  write(dir, "bad-push-batch-record-magic", two_workers(with(0, 2, ok0), with(1, 2, bad_magic)));
  auto pull = ok1;
  pull[6] = std::byte{11};  // a pull_response record
  write(dir, "bad-push-batch-record-type", two_workers(with(0, 2, ok0), with(1, 2, pull)));
  auto larger = ok1;
  larger[80 + 40] = std::byte{17};  // the second record declares 17 payload bytes, 16 are left
  write(dir, "bad-push-batch-record-larger", two_workers(with(0, 2, ok0), with(1, 2, larger)));
  // A record with another worker's rank: the push path's own check refuses it.
  write(dir, "bad-push-batch-other-sender",
        two_workers(with(0, 2, ok0), with(1, 2, push_batch_payload(0, {k0, k1}, b))));
  // A stranger's batch, before any hello.
  write(dir, "bad-push-batch-before-hello",
        script_writer(0)
            .open()
            .frame(0, 18, 0, 0, 0, 2, 0, 0, static_cast<std::uint8_t>(ok0.size()), ok0)
            .bytes());
}

// Scripts for fuzz_server_session (script.hpp): one worker session of each kind that must work,
// and one of each attack or mistake the server must refuse.
void server_sessions(const std::filesystem::path& dir) {
  using fuzzing::proof_kind;
  using fuzzing::script_writer;
  const float a[] = {1.0f, 2.5f, -3.0f, 4.0f};
  const float b[] = {0.5f, 0.5f, 0.5f, 0.5f};
  const std::span<const float> fa(a), fb(b);
  constexpr std::uint8_t f32 = 0, i32 = 6, m0 = 0, m1 = 1, l0 = 0;
  // Both workers prove the token, declare, push two rounds (a pull is the answer) and leave.
  auto two_workers = [&](std::uint8_t setup, bool offer) {
    script_writer w(setup);
    w.open().open().hello(0, proof_kind::right, m0, l0).hello(1, proof_kind::right, m1, l0);
    w.declare(0, 0, 1, 0, "w0").declare(1, 0, 1, 0, "w0");
    for (std::uint8_t round = 0; round < 2; ++round)
      w.push(0, 0, f32, round, fa).push(1, 0, f32, round, fb);
    if (offer) w.push(0, 1, f32, 0, fa, 0, true);
    w.bye(0, "").bye(1, "");
    return w.bytes();
  };
  write(dir, "valid-two-workers-push-pull", two_workers(0, false));
  write(dir, "valid-two-workers-failover-offer", two_workers(1, true));
  write(dir, "valid-two-workers-no-token", two_workers(4, false));
  {
    std::vector<float> big(32, 0.25f);  // 128 bytes: streamed with a 64-byte server chunk
    script_writer w(2);
    w.open().open().hello(0, proof_kind::right, m0, l0).hello(1, proof_kind::right, m1, l0);
    w.push(0, 2, f32, 0, std::span<const float>(big))
        .push(1, 2, f32, 0, std::span<const float>(big));
    w.bye(0, "").bye(1, "");
    write(dir, "valid-cut-through", w.bytes());
  }
  {
    const std::int32_t v[] = {0x7fffffff, -1};
    script_writer w(0);
    w.open().open().hello(0, proof_kind::right, m0, l0).hello(1, proof_kind::right, m1, l0);
    w.push(0, 3, i32, 0, std::span<const std::int32_t>(v))
        .push(1, 3, i32, 0, std::span<const std::int32_t>(v));
    w.bye(0, "done").bye(1, "");
    write(dir, "valid-int32-wraps", w.bytes());
  }
  // Strangers: frames before any hello, on the check key too.
  write(dir, "bad-frames-before-hello",
        script_writer(0)
            .open()
            .declare(0, 5, 1, 0, "x")
            .push(0, 5, f32, 0, fa)
            .bye(0, "hi")
            .frame(0, 10, 0, 0, 5, 0, 0, 0, 0)
            .frame(0, 9, 0, 0, 5, 0, 0, 0, 0)
            .bytes());
  write(dir, "bad-replayed-hello",
        script_writer(0)
            .open()
            .open()
            .hello(1, proof_kind::replayed, m0, l0)
            .push(1, 5, f32, 0, fa)
            .bytes());
  write(dir, "bad-wrong-token",
        script_writer(0)
            .open()
            .hello(0, proof_kind::wrong_token, m0, l0)
            .declare(0, 0, 1, 0, "x")
            .bytes());
  write(dir, "bad-proof-for-another-machine",
        script_writer(0).open().hello(0, proof_kind::other_machine, m1, l0).bytes());
  write(dir, "bad-flipped-proof",
        script_writer(0).open().hello(0, proof_kind::flipped, m0, l0, 31).bytes());
  write(dir, "bad-hello-not-in-job",
        script_writer(0)
            .open()
            .open()
            .hello(0, proof_kind::right, 2, l0)
            .hello(1, proof_kind::right, m0, 3)
            .bytes());
  // peer_hello frames of 31 and 33 bytes (length selectors 0xf0 and 0xf2).
  write(dir, "bad-hello-sizes",
        script_writer(0)
            .open()
            .open()
            .frame(0, 8, 0, 0, 0, 0, 0, 0, 0xf0)
            .frame(1, 8, 0, 0, 0, 0, 0, 0, 0xf2)
            .bytes());
  write(dir, "bad-transport-frame-before-hello",
        script_writer(0).open().frame(0, 0xd0, 0, 0, 0, 0, 0, 0, 4).bytes());
  write(dir, "bad-pending-flood",
        script_writer(0).open().open().open().open().hello(3, proof_kind::right, m0, l0).bytes());
  // Workers of the job that misbehave.
  write(dir, "bad-duplicate-hello",
        script_writer(0)
            .open()
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .hello(0, proof_kind::right, m0, l0)
            .hello(1, proof_kind::right, m0, l0)
            .bytes());
  write(dir, "bad-out-of-round",
        script_writer(0)
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .push(0, 0, f32, 3, fa)
            .push(0, 0, f32, 3, fa)
            .bytes());
  write(dir, "bad-push-twice-in-one-round",
        script_writer(0)
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .push(0, 0, f32, 0, fa)
            .push(0, 0, f32, 0, fa)
            .bye(0, "")
            .bytes());
  // quirks: 1 another sender (5), 2 tensor_bytes off by one, 4 a partial element.
  write(dir, "bad-push-quirks",
        script_writer(0)
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .push(0, 1, f32, 0, fa, 2)
            .push(0, 1, f32, 0, fa, 4)
            .push(0, 1, f32, 0, fa, 1 | (5 << 5))
            .bytes());
  // A name past BYTEPS_MAX_NAME_BYTES (selector 0xf1: max + 1), one past what a declare carries
  // (0xf4: 4097), then more tensors than BYTEPS_MAX_TENSORS.
  write(dir, "bad-names-past-limits",
        script_writer(0)
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .declare(0, 0, 0xf1, 0, "long")
            .declare(0, 1, 0xf4, 0, "huge")
            .declare(0, 0, 1, 0, "t0")
            .declare(0, 1, 1, 0, "t1")
            .declare(0, 2, 1, 0, "t2")
            .declare(0, 3, 1, 0, "t3")
            .declare(0, 4, 1, 3, "t4")
            .bytes());
  // Another transport's frame (skipped), a server's own frame type from a worker, and a type
  // no node knows, each from a worker of the job.
  write(dir, "bad-unknown-types",
        script_writer(0)
            .open()
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .hello(1, proof_kind::right, m1, l0)
            .frame(0, 0xd0, 0, 0, 0, 0, 0, 0, 4)
            .frame(0, 11, 0, 0, 0, 0, 0, 0, 3)
            .frame(1, 20, 0, 1, 0, 0, 0, 0, 0)
            .bytes());
  push_batches(dir);
  // Found by this fuzzer: an empty sum_offer while failover is off was summed from the buffer
  // of the worker's previous push, already handed over (a null pointer with that push's size).
  write(dir, "bad-empty-sum-offer-without-failover",
        script_writer(0)
            .open()
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .hello(1, proof_kind::right, m1, l0)
            .push(1, 0, f32, 0, fa)
            .push(1, 1, 3, 0, std::span<const float>(), 0, true)
            .bytes());
  write(dir, "bad-huge-push",
        script_writer(0)
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .frame(0, 10, 0, 0, 0, 0, 0, 0, 0xf8)
            .bytes());
  write(dir, "bad-close-mid-round",
        script_writer(0)
            .open()
            .open()
            .hello(0, proof_kind::right, m0, l0)
            .hello(1, proof_kind::right, m1, l0)
            .push(0, 0, f32, 0, fa)
            .close(1)
            .bytes());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (e.g. fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  frames(root / "fuzz_frame");
  rendezvous_payloads(root / "fuzz_rendezvous");
  server_sessions(root / "fuzz_server_session");
  std::printf("wrote the seed corpus under %s\n", root.c_str());
  return 0;
}
