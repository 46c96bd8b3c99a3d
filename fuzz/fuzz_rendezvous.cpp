// libFuzzer target: the rendezvous payloads and the reader under them.
//
// Every input is given to decode_hello, decode_welcome, decode_server_replaced,
// decode_membership and decode_job_state (what a worker joining an elastic job is sent), and
// drives a byte_reader through
// a sequence of reads that the input itself chooses. Each must return or throw
// wire::decode_error, nothing else (an escaping exception of any other type aborts, and
// libFuzzer reports it). A payload that decodes must re-encode to the same bytes: the format
// has one encoding per value, so a difference is a decoder bug.
#include <byteps/rendezvous/messages.hpp>
#include <byteps/wire/codec.hpp>
#include <byteps/worker/join_state.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

namespace {

using namespace bps;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_rendezvous: %s\n", what);
  std::abort();
}

bool same(const std::vector<std::byte>& a, std::span<const std::byte> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

void hello(std::span<const std::byte> in) {
  try {
    auto h = rendezvous::decode_hello(in);
    if (h.protocol != rendezvous::protocol_version) return;  // read no further, by design
    if (!same(rendezvous::encode(h), in)) broken("hello: decode then encode changed the bytes");
    Config c;
    (void)rendezvous::first_difference(rendezvous::hello::from(c, role::scheduler), h, "a:1");
  } catch (const wire::decode_error&) {
  }
}

void welcome(std::span<const std::byte> in) {
  try {
    auto w = rendezvous::decode_welcome(in);
    if (!same(rendezvous::encode(w), in)) broken("welcome: decode then encode changed the bytes");
    if (rendezvous::decode_welcome(rendezvous::encode(w)) != w) broken("welcome: no round trip");
  } catch (const wire::decode_error&) {
  }
}

void replaced(std::span<const std::byte> in) {
  try {
    auto m = rendezvous::decode_server_replaced(in);
    if (!same(rendezvous::encode(m), in)) broken("server_replaced: decode then encode changed the bytes");
  } catch (const wire::decode_error&) {
  }
}

void membership(std::span<const std::byte> in) {
  try {
    auto m = rendezvous::decode_membership(in);
    if (!same(rendezvous::encode(m), in)) broken("membership: decode then encode changed the bytes");
  } catch (const wire::decode_error&) {
  }
}

void job_state(std::span<const std::byte> in) {
  try {
    auto s = worker::decode_job_state(in);
    if (!same(worker::encode(s), in)) broken("job_state: decode then encode changed the bytes");
  } catch (const wire::decode_error&) {
  }
}

// The first bytes are a program: each byte's low 3 bits pick a read, the rest of the input is
// what is read.
void reader(std::span<const std::byte> in) {
  if (in.empty()) return;
  const std::size_t ops = std::min<std::size_t>(std::to_integer<std::size_t>(in[0]) % 16, in.size() - 1);
  auto program = in.subspan(1, ops);
  wire::byte_reader r(in.subspan(1 + ops));
  try {
    for (auto op : program) {
      switch (std::to_integer<unsigned>(op) & 7u) {
        case 0: (void)r.get<std::uint8_t>(); break;
        case 1: (void)r.get<std::int16_t>(); break;
        case 2: (void)r.get<std::uint32_t>(); break;
        case 3: (void)r.get<std::int64_t>(); break;
        case 4: (void)r.get_string(); break;
        case 5: (void)r.get_string(0); break;
        case 6: (void)r.get_string(std::to_integer<std::size_t>(op) >> 3); break;
        default: (void)r.done(); break;
      }
    }
  } catch (const wire::decode_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  hello(in);
  welcome(in);
  replaced(in);
  membership(in);
  job_state(in);
  reader(in);
  return 0;
}
