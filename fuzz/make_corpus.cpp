// Writes the seed corpus of the fuzz targets: valid encodings made by byteps's own encoders,
// and a few malformed ones next to them. Run from the repository root:
//   build-fuzz/fuzz/byteps_fuzz_make_corpus fuzz/corpus
// It rewrites the files it owns (named valid-* and bad-*) and leaves any others alone, so
// inputs that libFuzzer found and someone kept survive a rerun.
#include <byteps/core/dtype.hpp>
#include <byteps/rendezvous/messages.hpp>
#include <byteps/wire/codec.hpp>
#include <byteps/wire/declare.hpp>
#include <byteps/wire/frame.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (e.g. fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  frames(root / "fuzz_frame");
  rendezvous_payloads(root / "fuzz_rendezvous");
  std::printf("wrote the seed corpus under %s\n", root.c_str());
  return 0;
}
