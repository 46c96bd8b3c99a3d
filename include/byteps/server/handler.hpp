#pragma once
/// @file
/// The `bps::ServerHandler` concept: what a server does with a push, as a policy of
/// `bps::Server<T, H>`. ps-lite's `KVServer::set_request_handle` is the model: the server owns
/// the links, the engine threads, who waits for which round, the timeline, stall reports and
/// failures; the handler owns the per-key state and decides, push by push, who gets what.
/// Synchronous summation (`server::sync_sum`; the default is `server::decoding<sync_sum>`, which
/// decodes compressed pushes before summing) is one handler; asynchronous
/// training, which adds each push to stored parameters and answers at once, is another.
///
/// @par Requirements
/// A type `H` satisfies `ServerHandler` when:
/// - `H(const Config& cfg, detail::buffer_pool& pool)` builds it. `pool` is the server's pool of
///   receive buffers and outlives the handler; `cfg` is the server's.
/// - `h.handle(req)` takes one `server::request` and returns the `server::outcome` the server
///   carries out. It must not throw and must not block: it runs on the I/O path. What a worker
///   did wrong is `refuse`; a round that cannot be summed is `fail_round`.
///
/// @par Thread Safety
/// A server builds one handler per engine thread (`BYTEPS_SERVER_ENGINE_THREAD`) and calls it
/// only for that engine's keys, one call at a time (holding the engine's lock, on its thread or
/// on the I/O thread that read a small push). A handler needs no lock of its own.
///
/// @par Lifetime of the answer's bytes
/// The server sends `reply::bytes` without copying, and the transport reads them after `handle`
/// returned, so they must stay unchanged until every send of them is done. Either give the
/// server an owner in `reply::keep` (it holds it until then), or rely on the protocol as
/// `sync_sum` does: a worker pushes a key's next round only after it received this one, so bytes
/// that change only after every recipient pushed again are safe.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/compress/compressor.hpp"
#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

/// Bytes a link lends a handler: a streamed push's buffer, which the link still writes while
/// the handler reads its head (cut-through), a landed push's landing buffer (RDMA), or a push in
/// a colocated worker's ring (ipc). `owner` keeps them alive; a handler may hold it as long as
/// it reads them, and tells one frame from another by it.
struct payload_ref {
  std::span<const std::byte> bytes;  ///< the whole payload
  std::shared_ptr<const void> owner;
};

/// A push's bytes: the one way every push reaches a handler, however it came. Whole in a buffer
/// of the server's pool (`buffer` set), or lent by its link (`owner` set): streamed as it arrives
/// (cut-through, for handlers that ask for it, `streams_pushes`: several calls, each with more
/// `bytes_in`, `first` marking a frame's first and `complete` its last; a frame's calls come in
/// order, calls for other frames of the key may come between them), landed (RDMA) or in place
/// (ipc), both whole in one call (for handlers that ask for them, `reads_in_place`). Lent bytes
/// may be read until the handler answers that worker for the round (the worker pushes again
/// only after), never later, and must not be kept as the handler's own (no answer may be sent
/// from them).
struct push_bytes {
  std::span<const std::byte> bytes;   ///< the whole payload; the first `bytes_in` are in
  std::shared_ptr<const void> owner;  ///< lent bytes' owner; null for a push in `buffer`
  std::size_t bytes_in = 0;
  bool first = true;     ///< the frame's first call
  bool complete = true;  ///< the frame's last call: all of `bytes` are in
  /// A whole push in a buffer the server owns: a handler may keep its bytes without a copy by
  /// swapping in a buffer of its own (or an empty one); the server gives back to the pool
  /// whatever it holds after. Null for lent bytes.
  detail::buffer_pool::buffer* buffer = nullptr;

  /// A whole push in `b`, a buffer of the server's pool.
  static push_bytes in(detail::buffer_pool::buffer& b) noexcept {
    return {b.span(), nullptr, b.size, true, true, &b};
  }
  /// Bytes a link lends, `bytes_in` of them in so far.
  static push_bytes lent(payload_ref r, std::size_t bytes_in, bool first, bool complete) noexcept {
    return {r.bytes, std::move(r.owner), bytes_in, first, complete, nullptr};
  }
  payload_ref ref() const { return {bytes, owner}; }
};

/// One push or, with failover on, one `sum_offer` (a round's sum that a worker already got from
/// a server that died since).
struct request {
  const wire::header& head;  ///< the frame's header: type, key, part, round, dtype, shape
  push_bytes push;           ///< its payload, however it came
  int worker = -1;           ///< the sender's rank, checked against its link's peer_hello
  int num_workers = 0;       ///< `DMLC_NUM_WORKER`: the pushes that make a synchronous round
  bool failover = false;     ///< `Config::failover()`: a replacement server may start mid-job
  /// The tensor as messages name it: `'name'` once declared, else `key 0x...`. Costs a lock:
  /// call it only to build a message.
  const std::function<std::string()>& tensor_name;
  /// A push flagged `wire::flag_compressed`: how to make the key's server compressor, from the
  /// recipe its workers declared (server/decoding.hpp decodes with it); null otherwise.
  const compress::spec* codec = nullptr;

  /// A whole frame's bytes, wherever they came. Not for the calls of a push still arriving.
  std::span<const std::byte> whole() const noexcept { return push.bytes; }
};

/// The bytes a worker pulls, with the fields of the `pull_response` header that carries them.
struct reply {
  std::span<const std::byte> bytes;
  std::uint64_t round = 0;
  dtype type = dtype::float32;
  std::uint64_t offset = 0;        ///< the partition's byte offset in the tensor
  std::uint64_t tensor_bytes = 0;  ///< the whole tensor's size
  /// Held by the server until every send of `bytes` is done; empty when the handler keeps the
  /// bytes alive itself (see the file comment).
  std::shared_ptr<const void> keep;
  /// `bytes` are the key's server compressor's encoding (the pull_response is flagged
  /// `wire::flag_compressed`).
  bool compressed = false;
  /// `bytes` end with each worker's count of applied deltas (asynchronous training with
  /// failover; the pull_response is flagged `wire::flag_applied`).
  bool applied_counts = false;
  /// Elastic training: how many worker processes the sum holds, which the worker averages by
  /// (the pull_response's `sender`). Set by the server (the processes in the job now) unless
  /// the handler set it: a sum a worker offered holds the count it was released with.
  std::uint32_t contributors = 0;
};

/// A worker held in a key's waiting list, answered by `outcome::release_each` with a reply of
/// its own (its own round: held workers of one key may be at different rounds).
struct held_answer {
  int worker = -1;  ///< the held worker's rank
  reply answer;
};

/// What the server does after `handle`. For a push, `wait`, `release` and `fail_round` first put
/// its worker in the key's waiting list, so it is answered with the others; a `sum_offer` never
/// waits, since its worker already has the sum.
struct outcome {
  enum class kind {
    refuse,      ///< answer only this worker with `error` (a usage error); nothing else changes
    wait,        ///< the worker waits for the round; nothing is sent yet
    answer_now,  ///< answer only this worker with `answer`; it does not wait
    release,     ///< the round is complete: answer every waiting worker with `answer`
    fail_round,  ///< the round cannot complete: answer every waiting worker with `error`
    taken,       ///< nothing to send (a kept `sum_offer`)
    /// cut-through: answer every waiting worker with `answer`, one piece of the round's sum
    /// (`reply::offset` is the piece's); the round ends with the piece that has `last`
    piece,
    /// answer this worker with `answer` (it does not wait), and each worker of `released`,
    /// which must be waiting in the key's list, with its own reply; the others keep waiting
    /// (asynchronous training's bounded staleness, server/async_sum.hpp)
    release_each,
    /// the worker waits, as for `wait`, and each worker of `released` is answered as for
    /// `release_each`
    wait_and_release,
  };

  kind what = kind::taken;
  std::string error;  ///< refuse, fail_round: the message, naming the tensor and the worker
  reply answer;       ///< answer_now, release, piece
  bool last = false;  ///< piece: the round's last piece
  std::vector<held_answer> released;  ///< release_each, wait_and_release: whom it answers

  static outcome refuse(std::string why) { return make(kind::refuse, std::move(why), {}); }
  static outcome wait() { return make(kind::wait, {}, {}); }
  static outcome answer_now(reply r) { return make(kind::answer_now, {}, std::move(r)); }
  static outcome release(reply r) { return make(kind::release, {}, std::move(r)); }
  static outcome fail_round(std::string why) { return make(kind::fail_round, std::move(why), {}); }
  static outcome taken() { return make(kind::taken, {}, {}); }
  static outcome piece(reply r, bool last) {
    outcome o = make(kind::piece, {}, std::move(r));
    o.last = last;
    return o;
  }
  static outcome release_each(reply r, std::vector<held_answer> held) {
    outcome o = make(kind::release_each, {}, std::move(r));
    o.released = std::move(held);
    return o;
  }
  static outcome wait_and_release(std::vector<held_answer> held) {
    outcome o = make(kind::wait_and_release, {}, {});
    o.released = std::move(held);
    return o;
  }

 private:
  static outcome make(kind k, std::string error, reply r) {
    outcome o;
    o.what = k;
    o.error = std::move(error);
    o.answer = std::move(r);
    return o;
  }
};

/// The chunk a push of `bytes` is summed and answered in, given the server's chunk
/// `max_chunk` (`Config::server_chunk_bytes`; 0: off): about an eighth of the push, so that a
/// partition's first answer leaves early, but at least half of `max_chunk` (each chunk costs a
/// frame to every worker) and at most `max_chunk`; a multiple of 64. One rule for the server's
/// links, which read pushes in steps of it, and its handler's keys, which sum in it.
inline std::size_t chunk_for(std::size_t max_chunk, std::size_t bytes) noexcept {
  if (max_chunk == 0) return 0;
  const std::size_t eighth = (bytes / 8 + 63) / 64 * 64;
  const std::size_t half = std::max<std::size_t>(64, max_chunk / 128 * 64);
  return std::min(max_chunk, std::max(half, eighth));
}

/// Whether a push of `bytes` is summed as it arrives: the server's chunk is on and the push
/// makes at least two chunks of `chunk_for` its size.
inline bool streamed_size(std::size_t max_chunk, std::size_t bytes) noexcept {
  const std::size_t chunk = chunk_for(max_chunk, bytes);
  return chunk > 0 && bytes >= 2 * chunk;
}
inline bool streamed_size(const Config& cfg, std::size_t bytes) noexcept {
  return streamed_size(cfg.server_chunk_bytes, bytes);
}

/// A handler that takes pushes as they arrive has `static constexpr bool cut_through = true`;
/// it then gets streamed pushes (see `push_bytes`) of `streamed_size`.
template <class H>
concept streams_pushes = requires {
  requires H::cut_through;
};

/// A handler that can read a push where the transport wrote it (lent bytes, `push_bytes`) has
/// `static constexpr bool reads_in_place = true`; on a transport that registers memory its
/// server then lands each worker's pushes of a partition in one buffer that stays, so the
/// worker writes later rounds there without asking (RDMA's cached places). Other handlers get
/// every push in a buffer of its own (`push_bytes::buffer`), as over TCP.
template <class H>
concept reads_in_place = requires {
  requires H::reads_in_place;
};

/// A handler that cannot serve some jobs has `static void check_config(const Config&)`, which
/// throws `usage_error` saying why (a synchronous handler in an async job would answer sums where
/// workers expect parameters). The server calls it before it connects to anything.
template <class H>
concept checks_config = requires(const Config& cfg) {
  H::check_config(cfg);
};

/// A handler that decodes pushes flagged `wire::flag_compressed` (server/decoding.hpp) has
/// `static constexpr bool decodes_compressed = true`; a server whose handler has not refuses
/// them, since summing an encoding as the dtype would give workers a wrong answer.
template <class H>
concept decodes_pushes = requires {
  requires H::decodes_compressed;
};

/// Elastic mode: after a membership change, which members must push a partition's round again
/// (its round in flight started over, `restarts_rounds`).
struct round_redo {
  std::uint64_t key = 0;
  std::uint32_t part = 0;
  std::uint64_t round = 0;
  std::vector<int> workers;  ///< ascending
};

/// A handler that can go on when workers are removed (elastic mode, docs/plans/issue-39-elastic.md)
/// has `std::vector<round_redo> restart_rounds(const std::vector<bool>& members)`: only the
/// workers `members` marks take part from then on; every round in flight starts over under its
/// number, and it returns which members must push which rounds again.
template <class H>
concept restarts_rounds = requires(H& h, const std::vector<bool>& members) {
  { h.restart_rounds(members) } -> std::same_as<std::vector<round_redo>>;
};

}  // namespace bps::server

namespace bps {

/// A server's request handler; see the file comment for the contract.
template <class H>
concept ServerHandler = std::constructible_from<H, const Config&, detail::buffer_pool&> &&
    requires(H& h, const server::request& r) {
  { h.handle(r) } -> std::same_as<server::outcome>;
};

}  // namespace bps
