#pragma once
// The input language of fuzz_server_session: bytes read as a script of operations on a few
// connections to one server, so that libFuzzer's mutations stay meaningful (a changed byte is
// another key, another dtype, a wrong proof) instead of breaking a frame's checksum-like
// structure. `script` reads it; `script_writer` writes it, for make_corpus.cpp's seeds.
//
// Byte 0 is the setup: bit 0 failover on, bit 1 cut-through (a 64-byte server chunk), bit 2 an
// empty job token. Then operations, each an opcode byte (taken modulo 8) and its operands; an
// input that ends in the middle of one reads zeros for the rest:
//   0 open                  a new connection (at most max_connections)
//   1 hello   c P M L F     peer_hello for machine M, local rank L, with proof kind P
//                           (`proof_kind`); F: which proof byte a flipped proof flips
//   2 declare c K N R ...   a declare of key K, a name of N-selected length, recipe kind R
//   3 push    c K D n r Q . a push of n elements of dtype D for round r, quirks Q, the values
//   4 offer   (as push)     the same as a failover sum_offer
//   5 bye     c n text      a bye carrying n bytes of text
//   6 frame   c T f s K p r d N payload   any frame: type T, flags f, sender s, ... and N-selected
//                           payload length, of which the input holds what it holds (a
//                           push_batch: p is its record count, the payload its records)
//   7 close   c             the peer closes connection c
// Connections are numbered in the order they were opened; K indexes `keys`.
#include <byteps/compress/recipe.hpp>
#include <byteps/core/dtype.hpp>
#include <byteps/wire/declare.hpp>
#include <byteps/wire/frame.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bps::fuzzing {

inline constexpr std::size_t max_connections = 4;
inline constexpr std::size_t max_tensors = 3;      // BYTEPS_MAX_TENSORS of the fuzzed server
inline constexpr std::size_t max_name_bytes = 24;  // BYTEPS_MAX_NAME_BYTES
/// The key that only the final check's workers sum; a fuzzed worker that proved the token uses
/// keys[0] instead, a stranger may use it (and must change nothing).
inline constexpr std::uint64_t check_key = 0xc0ffee;
inline constexpr std::uint32_t check_local_rank = 7;  // no script's hello names it
inline constexpr std::array<std::uint64_t, 6> keys = {0x10, 0x11, 0x12, 0x13, 0x14, check_key};

enum class op : std::uint8_t { open, hello, declare, push, offer, bye, frame, close };
enum class proof_kind : std::uint8_t { right, wrong_token, replayed, other_machine, flipped };

struct operation {
  op kind = op::frame;
  std::size_t conn = 0;
  wire::header head;               // as the peer writes it
  std::vector<std::byte> payload;  // what the peer sends of it (hello: filled in by the harness)
  proof_kind proof = proof_kind::right;
  std::uint8_t flip = 0;    // a flipped proof's byte
  bool own_sender = false;  // the harness sets head.sender to the connection's machine
};

inline constexpr std::uint32_t machines[] = {0, 1, 2, 0xffffffffu};  // 2 and up: not in the job
inline constexpr std::uint32_t local_ranks[] = {0, 1, 1023, 1024};   // 1024: over the limit
inline constexpr std::uint64_t long_lengths[] = {31,
                                                 32,
                                                 33,
                                                 64,
                                                 65536,
                                                 65537,
                                                 std::uint64_t{1} << 20,
                                                 std::uint64_t{1} << 30,
                                                 std::uint64_t{1} << 62,
                                                 ~std::uint64_t{0}};

/// A declare's name length, from its selector byte: short ones, the limit and one past it,
/// and names past what a declare may carry at all.
constexpr std::size_t name_length(std::uint8_t sel) {
  constexpr std::size_t special[] = {max_name_bytes, max_name_bytes + 1, 300, 4096, 4097};
  return sel < 0xf0 ? sel % 32 + 1 : special[sel % std::size(special)];
}

/// A push's dtype, from its selector byte; 8 is none that exists.
constexpr std::uint32_t dtype_of(std::uint8_t sel) {
  return sel % 9 == 8 ? 99u : sel % 9;
}
constexpr std::size_t element_bytes(std::uint32_t t) {
  return t < 8 ? dtype_size(static_cast<dtype>(t)) : 1;
}

/// Any frame's type: the node's types (0 and 20, 21 unknown), transport types, and others.
constexpr std::uint16_t frame_type(std::uint8_t sel) {
  if (sel < 0xd0) return sel % 22;
  if (sel < 0xf0) return static_cast<std::uint16_t>(wire::first_transport_msg + sel % 16);
  return static_cast<std::uint16_t>(0x200 + sel);
}

class script {
 public:
  explicit script(std::span<const std::uint8_t> in) : in_(in) {}

  std::uint8_t setup() { return byte(); }

  std::optional<operation> next() {
    if (in_.empty()) return std::nullopt;
    operation o;
    o.kind = static_cast<op>(byte() % 8);
    if (o.kind == op::open) return o;
    o.conn = byte();
    switch (o.kind) {
      case op::hello:
        o.head.type = wire::msg::peer_hello;
        o.proof = static_cast<proof_kind>(byte() % 5);
        o.head.sender = machines[byte() % 4];
        o.head.part = local_ranks[byte() % 4];
        o.flip = byte();
        o.head.payload_bytes = 32;
        return o;
      case op::declare: {
        o.head.type = wire::msg::declare;
        o.head.key = keys[byte() % keys.size()];
        std::string name(name_length(byte()), 'n');
        const auto recipe = byte() % 4;
        auto given = take(std::min<std::size_t>(name.size(), 8));
        std::transform(given.begin(), given.end(), name.begin(),
                       [](std::byte b) { return static_cast<char>(b); });
        wire::declaration d{name, {}};
        if (recipe == 1) d.recipe = compress::serialise({"onebit", {}});
        if (recipe == 2) d.recipe = take(byte() % 16);
        o.payload = wire::encode_declare(d);
        if (recipe == 3) o.payload.pop_back();  // malformed: the recipe's length is cut
        o.head.payload_bytes = o.payload.size();
        return o;
      }
      case op::push:
      case op::offer: {
        o.head.type = o.kind == op::push ? wire::msg::push : wire::msg::sum_offer;
        o.head.key = keys[byte() % keys.size()];
        o.head.dtype = dtype_of(byte());
        const std::size_t n = byte() % 40;
        o.head.round = byte() % 4;
        const auto quirks = byte();
        o.own_sender = (quirks & 1) == 0;
        o.head.sender = quirks >> 5;
        std::size_t bytes = n * element_bytes(o.head.dtype);
        o.head.tensor_bytes = bytes + ((quirks & 2) != 0 ? 1 : 0);
        if ((quirks & 4) != 0 && bytes > 0) --bytes;  // a partial element
        if ((quirks & 8) != 0) o.head.flags |= wire::flag_compressed;
        if ((quirks & 16) != 0) o.head.offset = 4;
        o.payload = take(bytes);
        o.payload.resize(bytes);
        o.head.payload_bytes = bytes;
        return o;
      }
      case op::bye:
        o.head.type = wire::msg::bye;
        o.payload = take(byte());
        o.head.payload_bytes = o.payload.size();
        return o;
      case op::frame: {
        o.head.type = static_cast<wire::msg>(frame_type(byte()));
        o.head.flags = byte();
        const auto s = byte();
        o.head.sender = s == 0xff ? 0xffffffffu : s;
        o.head.key = keys[byte() % keys.size()];
        o.head.part = byte();
        o.head.round = byte();
        o.head.dtype = byte();
        const auto n = byte();
        o.head.payload_bytes = n < 0xf0 ? n : long_lengths[(n - 0xf0) % std::size(long_lengths)];
        o.head.tensor_bytes = o.head.payload_bytes;
        o.payload =
            take(static_cast<std::size_t>(std::min<std::uint64_t>(o.head.payload_bytes, 512)));
        return o;
      }
      default:  // close
        return o;
    }
  }

 private:
  std::uint8_t byte() {
    if (in_.empty()) return 0;
    const auto b = in_.front();
    in_ = in_.subspan(1);
    return b;
  }
  std::vector<std::byte> take(std::size_t n) {
    n = std::min(n, in_.size());
    std::vector<std::byte> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(in_[i]);
    in_ = in_.subspan(n);
    return out;
  }

  std::span<const std::uint8_t> in_;
};

/// The final check: worker `m`'s values for one round of `check_key`, and their exact sum.
inline std::array<float, 4> check_values(std::uint32_t m) {
  const float f = static_cast<float>(m + 1);
  return {f, -2 * f, 0.5f, 1024.0f};
}
inline std::array<float, 4> check_sum() {
  return {3.0f, -6.0f, 1.0f, 2048.0f};
}

inline wire::header check_push(std::uint32_t m) {
  wire::header h;
  h.type = wire::msg::push;
  h.sender = m;
  h.key = check_key;
  h.dtype = static_cast<std::uint32_t>(dtype::float32);
  h.tensor_bytes = h.payload_bytes = sizeof(float) * 4;
  return h;
}

inline operation hello_for(std::uint32_t machine, std::uint32_t local_rank) {
  operation o;
  o.kind = op::hello;
  o.head.type = wire::msg::peer_hello;
  o.head.sender = machine;
  o.head.part = local_rank;
  o.head.payload_bytes = 32;
  return o;
}

/// Writes a script, operation by operation (make_corpus.cpp's seeds). Selectors are the bytes
/// `script` reads: see its table above.
class script_writer {
 public:
  explicit script_writer(std::uint8_t setup) { out_.push_back(std::byte{setup}); }

  script_writer& open() { return put({0}); }
  script_writer& hello(std::uint8_t c, proof_kind p, std::uint8_t machine, std::uint8_t local_rank,
                       std::uint8_t flip = 0) {
    return put({1, c, static_cast<std::uint8_t>(p), machine, local_rank, flip});
  }
  /// A declare of keys[key] named `name` (whose length must be name_length(name_sel)).
  script_writer& declare(std::uint8_t c, std::uint8_t key, std::uint8_t name_sel,
                         std::uint8_t recipe, std::string_view name) {
    put({2, c, key, name_sel, recipe});
    std::string given(name.substr(0, 8));
    given.resize(std::min<std::size_t>(name_length(name_sel), 8), 'n');  // the bytes script reads
    return raw(std::as_bytes(std::span(given.data(), given.size())));
  }
  template <class T>
  script_writer& push(std::uint8_t c, std::uint8_t key, std::uint8_t dtype_sel, std::uint8_t round,
                      std::span<const T> values, std::uint8_t quirks = 0, bool offer = false) {
    // At most 39 values: script reads the count modulo 40.
    put({static_cast<std::uint8_t>(offer ? 4 : 3), c, key, dtype_sel,
         static_cast<std::uint8_t>(values.size()), round, quirks});
    return raw(std::as_bytes(values));
  }
  script_writer& bye(std::uint8_t c, std::string_view text) {
    put({5, c, static_cast<std::uint8_t>(text.size())});
    return raw(std::as_bytes(std::span(text.data(), text.size())));
  }
  script_writer& frame(std::uint8_t c, std::uint8_t type_sel, std::uint8_t flags,
                       std::uint8_t sender, std::uint8_t key, std::uint8_t part, std::uint8_t round,
                       std::uint8_t dtype_sel, std::uint8_t length_sel,
                       std::span<const std::byte> payload = {}) {
    put({6, c, type_sel, flags, sender, key, part, round, dtype_sel, length_sel});
    return raw(payload);
  }
  script_writer& close(std::uint8_t c) { return put({7, c}); }

  std::vector<std::byte> bytes() const { return out_; }

 private:
  script_writer& put(std::initializer_list<std::uint8_t> b) {
    for (auto x : b) out_.push_back(std::byte{x});
    return *this;
  }
  script_writer& raw(std::span<const std::byte> b) {
    out_.insert(out_.end(), b.begin(), b.end());
    return *this;
  }
  std::vector<std::byte> out_;
};

}  // namespace bps::fuzzing
