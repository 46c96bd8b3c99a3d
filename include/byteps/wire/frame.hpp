#pragma once
/// @file
/// The frame: a fixed 64-byte little-endian header followed by `payload_bytes` of payload.
/// Every message between byteps nodes is one frame. The header is validated before anything
/// is allocated for the payload, so a foreign or hostile peer cannot make a node allocate
/// what it claims.
///
/// Layout (offsets in bytes):
///   0 magic u32 | 4 format u16 | 6 type u16 | 8 flags u32 | 12 sender u32 |
///  16 key u64 | 24 part u32 | 28 dtype u32 | 32 round u64 | 40 payload_bytes u64 |
///  48 tensor_bytes u64 | 56 offset u64

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/core.h>

namespace bps::wire {

inline constexpr std::uint32_t magic = 0x31535042;  // "BPS1" read as little-endian bytes
inline constexpr std::uint16_t format_version = 1;
inline constexpr std::size_t header_size = 64;

/// Wire values are part of the protocol: never renumber.
enum class msg : std::uint16_t {
  hello = 1,            ///< node -> scheduler: who I am (payload: rendezvous::hello)
  welcome = 2,          ///< scheduler -> node: your rank and the cluster (payload: rendezvous::welcome)
  refuse = 3,           ///< scheduler -> node: you cannot join (payload: reason text)
  barrier = 4,          ///< node -> scheduler: entered barrier (round = barrier number)
  barrier_release = 5,  ///< scheduler -> node: everyone entered barrier `round`
  bye = 6,              ///< worker -> scheduler or server: leaving (payload: why it failed, or none)
  shutdown = 7,         ///< scheduler -> server: all workers left; exit
  peer_hello = 8,       ///< worker -> server: first frame (sender = machine, part = local rank,
                        ///< payload: the proof of the job token, rendezvous/auth.hpp)
  declare = 9,          ///< worker -> server: tensor `key` is named (payload: name)
  push = 10,            ///< worker -> server: a partition's contribution for `round`
  pull_response = 11,   ///< server -> worker: the partition's sum for `round`
  error = 12,           ///< server -> worker or scheduler -> node: payload is the message text
  node_failed = 13,     ///< scheduler -> node: a node died (payload: text)
  heartbeat = 14,       ///< node <-> scheduler: I am alive (round != 0: a clock probe)
  sum_offer = 15,       ///< worker -> replacement server: the sum of `round` it received (failover)
  server_replaced = 16, ///< scheduler -> worker: server `rank` now lives elsewhere (failover)
  challenge = 17,       ///< listener -> new connection: a fresh nonce its hello must prove (payload)
  push_batch = 18,      ///< worker -> server: small pushes in one frame (batch.hpp; part = count)
  answer_batch = 19,    ///< server -> worker: small pull_responses in one frame (batch.hpp)
  rows_request = 20,    ///< worker -> server: an embedding table's declare, pull or push
                        ///< (payload: table/messages.hpp)
  rows_answer = 21,     ///< server -> worker: a rows_request's answer (a pull's rows)
  membership = 22,      ///< scheduler -> worker, server: the worker machines now in the job
                        ///< (elastic training; payload: rendezvous::membership)
  redo = 23,            ///< server -> worker: push partition (key, part) of `round` again; its
                        ///< round started over without a removed worker (elastic training)
  // Elastic training, a worker joining a running job (rendezvous/impl/scheduler_join_running.hpp):
  step_query = 24,      ///< scheduler -> worker: a worker waits to join; say your step boundary
  step_report = 25,     ///< worker -> scheduler: `round` = step boundaries passed so far
  join_at = 26,         ///< scheduler -> worker: stop at step boundary `round` (0: the join is
                        ///< off) for the join; `sender` = the machine whose rank 0 sends state,
                        ///< or `boundary_only`: no join, membership epoch `key` (a removal) is
                        ///< seen at boundary `round` (0: at the next)
  at_boundary = 27,     ///< worker -> scheduler: waiting at boundary `round` with nothing in
                        ///< flight (payload: the job's state, from the worker that sends it)
  join_state = 28,      ///< scheduler -> joining worker: its membership and the job's state
  membership_ack = 29,  ///< server -> scheduler: membership epoch `round` applied
};
inline constexpr std::uint16_t max_msg = 29;
/// `join_at`'s `sender` when no worker joins: the agreed boundary only makes a removal visible.
inline constexpr std::uint32_t boundary_only = 0xffffffffu;

/// The most bytes of a job's state a worker joining an elastic job is sent (`join_state`, and
/// the `at_boundary` that carries it to the scheduler): the registered tensors and the
/// trainer's own bytes (worker/join_state.hpp). Other control frames are far smaller.
inline constexpr std::uint64_t max_state_payload = std::uint64_t{1} << 30;

/// Types 0x100 .. 0x1ff belong to transports (a decorator's own handshake, say), not to nodes.
/// Their payload is at most `max_transport_payload` bytes. A transport whose receiver does not
/// ask for them (`receiver_capabilities::transport_frames`) reads and drops them, so a plain peer
/// ignores a decorator's offers instead of closing the link.
inline constexpr std::uint16_t first_transport_msg = 0x100;
inline constexpr std::uint16_t last_transport_msg = 0x1ff;
inline constexpr std::uint64_t max_transport_payload = 65536;
constexpr bool is_transport_msg(msg m) noexcept {
  const auto t = static_cast<std::uint16_t>(m);
  return t >= first_transport_msg && t <= last_transport_msg;
}

constexpr std::string_view msg_name(msg m) noexcept {
  switch (m) {
    case msg::hello: return "hello";
    case msg::welcome: return "welcome";
    case msg::refuse: return "refuse";
    case msg::barrier: return "barrier";
    case msg::barrier_release: return "barrier_release";
    case msg::bye: return "bye";
    case msg::shutdown: return "shutdown";
    case msg::peer_hello: return "peer_hello";
    case msg::declare: return "declare";
    case msg::push: return "push";
    case msg::pull_response: return "pull_response";
    case msg::error: return "error";
    case msg::node_failed: return "node_failed";
    case msg::heartbeat: return "heartbeat";
    case msg::sum_offer: return "sum_offer";
    case msg::server_replaced: return "server_replaced";
    case msg::challenge: return "challenge";
    case msg::push_batch: return "push_batch";
    case msg::answer_batch: return "answer_batch";
    case msg::rows_request: return "rows_request";
    case msg::rows_answer: return "rows_answer";
    case msg::membership: return "membership";
    case msg::redo: return "redo";
    case msg::step_query: return "step_query";
    case msg::step_report: return "step_report";
    case msg::join_at: return "join_at";
    case msg::at_boundary: return "at_boundary";
    case msg::join_state: return "join_state";
    case msg::membership_ack: return "membership_ack";
  }
  return is_transport_msg(m) ? "transport" : "unknown";
}

/// Flags of an `error` frame.
inline constexpr std::uint32_t flag_fatal = 1;  ///< the cluster is broken (a peer died)
inline constexpr std::uint32_t flag_usage = 2;  ///< the request was wrong (shape mismatch, ...)
/// Flag of a `push` frame: the worker records this push in its timeline (detail/trace.hpp), so
/// the server records its side too. Servers that do not trace ignore it.
inline constexpr std::uint32_t flag_traced = 4;
/// Flags of a `pull_response` frame: an answer in pieces (cut-through summation,
/// server/sync_sum.hpp). A piece carries the bytes at `offset` (absolute, in the tensor) of its
/// partition's sum; a partition's pieces come in order, and the last one has both flags.
inline constexpr std::uint32_t flag_piece = 8;
inline constexpr std::uint32_t flag_last_piece = 16;
/// Flag of a `push` and a `pull_response`: the payload is a compressor's encoding that the
/// server decodes (server/decoding.hpp). A push's payload is then a u64 (little-endian) of the
/// partition's raw bytes followed by the encoding; an answer's is the encoding alone (the worker
/// knows its partition's size). A server never streams such a push (cut-through).
inline constexpr std::uint32_t flag_compressed = 32;
/// Bytes before the encoding in a compressed push: the partition's raw size.
inline constexpr std::size_t compressed_prefix_bytes = 8;
/// Flag of a `pull_response` and a `sum_offer` of asynchronous training with failover on
/// (server/async_sum.hpp): after the partition's parameters come `num_workers` u64s
/// (little-endian), worker w's count of deltas that the parameters hold (its rounds 1 to that
/// count), so that a replacement server can tell which re-pushed deltas an offer already holds.
inline constexpr std::uint32_t flag_applied = 64;
/// Bytes of the counts after the parameters in a frame flagged `flag_applied`.
constexpr std::uint64_t applied_counts_bytes(int num_workers) noexcept {
  return 8 * static_cast<std::uint64_t>(num_workers < 0 ? 0 : num_workers);
}
/// Flag of a `push`: it holds none of the sum's data, only zeros that keep the round whole: a
/// broadcast's push from a machine without its root. A server fails a round that none of its
/// pushes' data reached (elastic training: the root's machine was removed while the broadcast
/// was in flight), instead of answering the zeros (server/key_state.hpp).
inline constexpr std::uint32_t flag_no_data = 128;

struct header {
  msg type = msg::hello;
  std::uint32_t flags = 0;
  std::uint32_t sender = 0;
  std::uint64_t key = 0;
  std::uint32_t part = 0;
  std::uint32_t dtype = 0;
  std::uint64_t round = 0;
  std::uint64_t payload_bytes = 0;
  std::uint64_t tensor_bytes = 0;
  std::uint64_t offset = 0;
  friend bool operator==(const header&, const header&) = default;
};

using header_bytes = std::array<std::byte, header_size>;

namespace detail {
template <class T>
inline void put_le(std::byte* p, T v) noexcept {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
template <class T>
inline T get_le(const std::byte* p) noexcept {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(std::to_integer<T>(p[i])) << (8 * i);
  return v;
}
}  // namespace detail

/// Elastic training: a synchronous `sum_offer` ends with a u32 (little-endian), the worker
/// processes its sum holds, so that a replacement server answers it with that divisor (an
/// answer's `sender`) whatever workers were removed since.
inline constexpr std::size_t contributors_tail_bytes = 4;
inline void append_contributors(std::vector<std::byte>& payload, std::uint32_t contributors) {
  std::byte b[contributors_tail_bytes];
  detail::put_le<std::uint32_t>(b, contributors);
  payload.insert(payload.end(), b, b + contributors_tail_bytes);
}
inline std::uint32_t read_contributors(std::span<const std::byte> tail) {
  return detail::get_le<std::uint32_t>(tail.data());
}

inline void encode(const header& h, std::span<std::byte, header_size> out) noexcept {
  using detail::put_le;
  std::byte* p = out.data();
  put_le<std::uint32_t>(p + 0, magic);
  put_le<std::uint16_t>(p + 4, format_version);
  put_le<std::uint16_t>(p + 6, static_cast<std::uint16_t>(h.type));
  put_le<std::uint32_t>(p + 8, h.flags);
  put_le<std::uint32_t>(p + 12, h.sender);
  put_le<std::uint64_t>(p + 16, h.key);
  put_le<std::uint32_t>(p + 24, h.part);
  put_le<std::uint32_t>(p + 28, h.dtype);
  put_le<std::uint64_t>(p + 32, h.round);
  put_le<std::uint64_t>(p + 40, h.payload_bytes);
  put_le<std::uint64_t>(p + 48, h.tensor_bytes);
  put_le<std::uint64_t>(p + 56, h.offset);
}

inline header_bytes encode(const header& h) noexcept {
  header_bytes b{};
  encode(h, b);
  return b;
}

/// Why a header was refused; `ok` when it was not.
enum class decode_status { ok, bad_magic, bad_version, unknown_type, too_large };

struct decode_result {
  decode_status status = decode_status::ok;
  header value{};
  std::string reason;  ///< for logs: what was wrong, with the offending value
  explicit operator bool() const noexcept { return status == decode_status::ok; }
};

/// Decodes and validates a header. `max_payload` bounds `payload_bytes`.
inline decode_result decode(std::span<const std::byte, header_size> in, std::uint64_t max_payload) {
  using detail::get_le;
  const std::byte* p = in.data();
  decode_result r;
  auto m = get_le<std::uint32_t>(p + 0);
  if (m != magic) {
    r.status = decode_status::bad_magic;
    std::string text;  // what it sent, as text where it is printable ("GET ", "SSH-")
    for (std::size_t i = 0; i < 4; ++i) {
      const auto c = std::to_integer<unsigned char>(p[i]);
      text += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '.';
    }
    r.reason = fmt::format("bad magic 0x{:08x} ('{}'; expected 0x{:08x}): not a byteps peer", m,
                           text, magic);
    return r;
  }
  auto v = get_le<std::uint16_t>(p + 4);
  if (v != format_version) {
    r.status = decode_status::bad_version;
    r.reason = fmt::format("frame format {} (this build speaks {})", v, format_version);
    return r;
  }
  auto t = get_le<std::uint16_t>(p + 6);
  const bool transport = t >= first_transport_msg && t <= last_transport_msg;
  if (!transport && (t == 0 || t > max_msg)) {
    r.status = decode_status::unknown_type;
    r.reason = fmt::format("unknown message type {}", t);
    return r;
  }
  header& h = r.value;
  h.type = static_cast<msg>(t);
  h.flags = get_le<std::uint32_t>(p + 8);
  h.sender = get_le<std::uint32_t>(p + 12);
  h.key = get_le<std::uint64_t>(p + 16);
  h.part = get_le<std::uint32_t>(p + 24);
  h.dtype = get_le<std::uint32_t>(p + 28);
  h.round = get_le<std::uint64_t>(p + 32);
  h.payload_bytes = get_le<std::uint64_t>(p + 40);
  h.tensor_bytes = get_le<std::uint64_t>(p + 48);
  h.offset = get_le<std::uint64_t>(p + 56);
  if (transport && h.payload_bytes > max_transport_payload) max_payload = max_transport_payload;
  if (h.payload_bytes > max_payload) {
    r.status = decode_status::too_large;
    r.reason = fmt::format("{} frame declares {} payload bytes, more than the limit {}",
                           msg_name(h.type), h.payload_bytes, max_payload);
  }
  return r;
}

inline std::span<const std::byte> as_bytes(std::string_view s) noexcept {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace bps::wire
