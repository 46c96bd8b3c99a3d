#pragma once
/// @file
/// The `bps::Transport` concept: how frames move between nodes.
///
/// A transport makes *links*: ordered, reliable, bidirectional frame channels to one peer,
/// either by `connect` or by accepting on a `listen`ing port. Sending takes a header and a
/// payload span that the caller keeps alive until `on_sent` runs, so payloads go out of the
/// caller's memory without a copy (TCP gathers header and payload into one write; RDMA will post
/// them from registered memory). Receiving asks the link's `receiver` where the payload of each
/// frame must land *before* reading it, so received data is written straight into the caller's
/// tensor (TCP reads into it; RDMA will target it). A transport whose payloads arrive in memory
/// it shares with the sender (an ipc ring) may instead hand a receiver that asks for it the
/// payload where it lies (`in_place_receiver::takes_in_place`). `register_memory` lets a transport
/// pin and register a buffer once; for TCP it does nothing.
///
/// Threading: a transport runs its own I/O threads. `receiver` callbacks run on them, one at a
/// time per link and in frame order; they must not block for long. `send` may be called from any
/// thread. When a link fails or closes, `on_close` runs exactly once, after the last
/// `on_message`. `on_sent` runs exactly once per send, as soon as the transport will not read
/// the payload again: after it was written, or when the link closed with the send still queued
/// (the frame is then lost), or at once for a send on a closed link. It never runs inside
/// `send` itself, so a caller may hold its own lock while sending. So an owner may free or reuse
/// a payload once its `on_sent` ran. After the transport's `stop()`, nothing runs any more:
/// sends are dropped and their `on_sent` never runs (no payload is read either).
///
/// Options: a transport's knobs are its own `T::options` (a plain value; tcp_options.hpp is the
/// model), not members of `Config`, as Gloo's `transport/tcp/attr.h`. A node passes them to
/// `T(cfg, options)`; a caller that gives none gets `T::options::from(cfg)`, which maps the
/// environment's values that `Config::from_env()` recorded (the only reader of the environment)
/// to the options. A decorator's options hold its inner transport's as `inner`.
///
/// Writing a new transport: copy transport/tcp/tcp.hpp's shape; `static_assert(bps::Transport<T>)`.

#include <fmt/core.h>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "byteps/core/config.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {

/// Cut-through, a capability of a receiver (`receiver_capabilities::streaming`): one that can
/// use a payload's first bytes before the rest (a server summing a large push chunk by chunk
/// while it still arrives). Asked at most once per frame, after `payload_destination`. TCP
/// reports after each read of a step; RDMA per written chunk (each WRITE_WITH_IMM); a payload
/// that arrives whole (an ipc ring's) gets no reports at all, so a receiver must not count on
/// any.
class streaming_receiver {
 public:
  /// A step > 0: `on_progress` each time at least that many more bytes of `h`'s payload are
  /// in, never for the last bytes (`on_message` follows for them, so the frame's end is seen
  /// once). 0 keeps the single read of the whole payload.
  virtual std::size_t progress_step(const wire::header& h) = 0;
  /// The first `bytes_in` bytes of the span `payload_destination` returned for `h` hold the
  /// frame's bytes; the rest may still be written. Runs under the rules of `on_message` (the
  /// link's I/O thread, in frame order, not for long); throwing closes the link as it does there.
  /// A link that fails mid-payload runs `on_close` and no `on_message`: bytes reported in are no
  /// promise that the frame completes.
  virtual void on_progress(const wire::header& h, std::size_t bytes_in) = 0;

 protected:
  ~streaming_receiver() = default;
};

/// RDMA's cached destinations, a capability of a receiver (`receiver_capabilities::cached`).
class cached_destinations {
 public:
  /// True promises that `dest` (what `payload_destination` just returned for `h`), which lies
  /// in memory its owner registered, is the place of every later frame with h's (key, part,
  /// type, offset) while the link lives, reserved for them. The transport may then let the
  /// sender write such a frame there before the receiver is asked (an (address, rkey)
  /// advertised once, reused by later rounds). If a later frame's destination is elsewhere after
  /// all, its bytes are moved there from the old place and the advertisement is withdrawn.
  /// False has the receiver asked before every payload. TCP never asks.
  virtual bool destination_stays(const wire::header& h, std::span<const std::byte> dest) = 0;

 protected:
  ~cached_destinations() = default;
};

/// Payloads in place, a capability of a receiver (`receiver_capabilities::in_place`): a
/// transport whose payloads arrive in memory it shares with the sender (`transport::ipc`'s
/// ring) hands them over where they lie.
class in_place_receiver {
 public:
  /// Asked before the transport would copy a payload out, with the frame's header
  /// (`payload_bytes` its payload's size). True: the frame comes through `on_message_in_place`,
  /// with no `payload_destination`, `progress_step` or `on_message`. Runs under the rules of
  /// `on_message`.
  virtual bool takes_in_place(const wire::header& h) = 0;
  /// The frame `h` is complete, and its payload is `payload`, in the transport's memory. The
  /// bytes stay valid and unchanged while any copy of `keep` lives, on any thread, even after
  /// the link closed or the transport stopped; dropping the last copy (on any thread, in any
  /// order among frames) gives the space back to the sender. Until then the sender's later
  /// payloads may not fit and take the slower way, so a receiver drops `keep` once it has read
  /// the bytes, and never answers from them. Runs under the rules of `on_message`; throwing
  /// closes the link as it does there. Only for frames `takes_in_place` took.
  virtual void on_message_in_place(const wire::header& h, std::span<const std::byte> payload,
                                   std::shared_ptr<const void> keep) = 0;

 protected:
  ~in_place_receiver() = default;
};

/// Admission, a capability of a receiver (`receiver_capabilities::admission`): a listener's
/// link whose peer has to prove who it is first (rendezvous/gate.hpp).
class peer_admission {
 public:
  /// False while the peer has not proved who it is: a transport then takes none of its
  /// transport frames (a decorator's handshake) and closes the link on one instead, and a
  /// decorator that announces itself to the peer waits until this turns true.
  virtual bool peer_admitted() const = 0;

 protected:
  ~peer_admission() = default;
};

/// What a receiver does beyond its three duties. Each is absent (null, false) unless the
/// receiver has it, and a transport asks for what it can use: TCP for streaming and
/// admission, RDMA for those and cached destinations, ipc for payloads in place. A link asks
/// once, when it starts with the receiver; the answer holds for the link's life.
struct receiver_capabilities {
  streaming_receiver* streaming = nullptr;
  cached_destinations* cached = nullptr;
  in_place_receiver* in_place = nullptr;
  peer_admission* admission = nullptr;  ///< absent: every peer is admitted
  /// It handles frames of the transport range (`wire::is_transport_msg`): a transport
  /// decorator's receiver; a node's never sees them.
  bool transport_frames = false;

  std::size_t progress_step(const wire::header& h) const {
    return streaming != nullptr ? streaming->progress_step(h) : 0;
  }
  bool peer_admitted() const { return admission == nullptr || admission->peer_admitted(); }
  bool takes_in_place(const wire::header& h) const {
    return in_place != nullptr && in_place->takes_in_place(h);
  }
  bool destination_stays(const wire::header& h, std::span<const std::byte> dest) const {
    return cached != nullptr && cached->destination_stays(h, dest);
  }
};

/// What a link tells its owner: where a payload goes, a whole frame, the link's end.
/// Implemented by the worker, the server and rendezvous code; what else one does, it says in
/// `capabilities()`.
class receiver {
 public:
  virtual ~receiver() = default;
  /// Where the payload of `h` must be written. Return a span of exactly `h.payload_bytes`
  /// bytes that stays valid until `on_message`. Return an empty span with a non-zero payload to
  /// refuse the frame: the link is closed with `reason`.
  virtual std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) = 0;
  /// The frame is complete; `payload` is the span returned above.
  virtual void on_message(const wire::header& h, std::span<std::byte> payload) = 0;
  /// The link is gone: closed by us, by the peer, or failed. `reason` says which, for messages.
  virtual void on_close(const std::string& reason) = 0;
  /// The optional duties it has; none by default, so receivers that do not stream, cache,
  /// take payloads in place or gate their peer pay nothing for them.
  virtual receiver_capabilities capabilities() { return {}; }
};

using sent_callback = std::function<void()>;

}  // namespace bps::transport

namespace bps {

/// A link: one peer.
template <class L>
concept TransportLink = requires(L& link, std::shared_ptr<transport::receiver> r,
                                 const wire::header& h, std::span<const std::byte> payload,
                                 transport::sent_callback cb) {
  link.start(r);                                        // begin delivering frames to r
  link.send(h, payload, std::move(cb));                 // queue a frame; payload lives until cb
  link.close();                                         // idempotent; on_close follows
  { link.peer() } -> std::convertible_to<std::string>;  // "host:port", for messages
  { link.local_host() } -> std::convertible_to<std::string>;
};

/// A transport policy.
template <class T>
concept Transport = std::copy_constructible<typename T::options> &&
    std::constructible_from<T, const Config&, const typename T::options&> &&
    TransportLink<typename T::link> && requires(const Config& cfg) {
  { T::options::from(cfg) } -> std::same_as<typename T::options>;
} && requires(T& t, const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout,
              std::function<void(std::shared_ptr<typename T::link>)> on_accept,
              std::span<std::byte> memory) {
  { T::name } -> std::convertible_to<std::string_view>;
  // Binds and accepts forever; returns the bound port (useful when port is 0).
  { t.listen(host, port, on_accept) } -> std::same_as<std::uint16_t>;
  // Retries until the deadline; throws communicator_error naming host:port when it passes.
  { t.connect(host, port, timeout) } -> std::same_as<std::shared_ptr<typename T::link>>;
  t.register_memory(memory);
  t.stop();  // closes every link and joins the I/O threads; idempotent
};

namespace transport {

/// An optional capability: a transport that can let a peer on the same host read payloads
/// where they lie in named shared memory (`transport::ipc`). `share_memory(name, memory)`
/// says that `memory` is this process's mapping, from offset 0, of the POSIX shared-memory
/// segment `name`, which the peer may map by that name; a payload sent from inside it may then
/// go by reference instead of a copy. An empty `memory` withdraws the name (before the caller
/// unmaps it). `shares_memory()` says whether the transport would use it at all.
///
/// Unlike a copied payload, one sent by reference is read by the peer after `on_sent` ran: the
/// caller promises not to change its bytes until the peer is done with them, which for a push
/// is when the server answered it (it reads pushes until it answers the round, as it does with
/// RDMA's landed pushes: server/handler.hpp).
template <class T>
concept SharesMemory = requires(T& t, const T& ct, const std::string& name,
                                std::span<std::byte> memory) {
  { ct.shares_memory() } -> std::convertible_to<bool>;
  t.share_memory(name, memory);
};

/// An optional capability of a link: `send_partition(h, payload, on_sent)`, a push whose
/// partition (h.key, h.part) the caller sends again only once the peer answered this one (a
/// worker runs one operation on a tensor at a time). The link may keep the payload in memory of
/// its own for that partition, which the peer reads until it answers (`transport::ipc` does,
/// for a server on its host). Otherwise it is `send`.
template <class L>
concept StagesPartitions = requires(L& l, const wire::header& h,
                                    std::span<const std::byte> payload, sent_callback cb) {
  l.send_partition(h, payload, std::move(cb));
};

/// `l.send_partition(h, payload, on_sent)`, or `l.send` for a link without it.
template <class L>
void send_partition(L& l, const wire::header& h, std::span<const std::byte> payload,
                    sent_callback on_sent) {
  if constexpr (StagesPartitions<L>) {
    l.send_partition(h, payload, std::move(on_sent));
  } else {
    l.send(h, payload, std::move(on_sent));
  }
}

/// An optional capability of a link: `has_unread_bytes()`, whether the peer's bytes wait in it
/// not read yet. A listener that must close one of many connections that have not proved
/// themselves closes a silent one first (rendezvous/gate.hpp): a peer that answered is not
/// silent, however far behind the reading thread is.
template <class L>
concept TellsUnreadBytes = requires(L& l) {
  { l.has_unread_bytes() } -> std::convertible_to<bool>;
};

/// `l.has_unread_bytes()`, or false (silent) for a link that cannot tell.
template <class L>
bool has_unread_bytes(L& l) {
  if constexpr (TellsUnreadBytes<L>)
    return l.has_unread_bytes();
  else
    return false;
}

}  // namespace transport

}  // namespace bps
