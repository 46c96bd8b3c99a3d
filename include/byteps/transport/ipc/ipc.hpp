#pragma once
/// @file
/// `bps::transport::ipc<Inner>`: payloads between two processes of one machine go through
/// shared memory instead of the inner transport (BytePS's `BYTEPS_ENABLE_IPC`, for a worker and
/// the server colocated with it). Headers still travel on the inner link, which keeps every
/// frame in order and every failure visible; only the payload bytes take the shortcut, which
/// spares them the kernel's TCP stack on both ends.
///
///   using net = bps::transport::ipc<bps::transport::tcp>;
///   bps::Server<net> server(cfg);                       // colocated servers and
///   bps::Communicator<net, bps::local::host, ...> c(cfg);  // their workers take it
///
/// @par Handshake (transport frames, which a plain transport skips)
/// 1. The accepting end (the server) announces `ipc_able` on every link from its own host.
/// 2. The connecting end (the worker), if it is an ipc transport too and `options::enabled`
///    (`BYTEPS_ENABLE_IPC`) is on, creates a ring in POSIX shared memory and sends `ipc_offer`
///    with its name.
/// 3. The server maps the ring (the name is unlinked once both mapped it) and answers
///    `ipc_accept`; then it makes a ring of its own for the way back and offers it the same way,
///    and the worker maps it and answers `ipc_accept`. From then on, payloads of at least
///    `min_ipc_bytes` that fit in the sender's ring are copied into it, announced by an
///    `ipc_payload` frame (ring position and length) right before their header. A node that
///    takes the frame in place (`in_place_receiver::takes_in_place`: a server's push, which its handler
///    sums straight from the ring) gets the bytes where they lie, and the ring space is freed
///    when the node lets go of them, in whatever order; otherwise the receiver copies them out
///    into the destination its node names (an answer: the worker's own tensor) and frees the
///    space at once. A payload that does not fit goes by the inner link, as before the
///    handshake. Each direction starts using its ring once its `ipc_accept` came back.
///    Answers take the ring from `min_ipc_answer_bytes` (128 KiB) on, pushes from
///    `min_ipc_bytes` (16 KiB).
/// 4. Memory the sender shares by name (`share_memory`: the worker's `local::host` segments,
///    where its owned slices lie) is offered once per link (`ipc_share`, transport/ipc/ipc_shared.hpp)
///    when a payload first lies in it; once the peer mapped it (`ipc_share_accept`), payloads
///    that lie whole in it, 64-byte aligned, go as their place (`ipc_shared_payload`) instead
///    of a copy into the ring, and a node that takes frames in place reads them there. The
///    sender keeps them unchanged until the peer is done (transport.hpp, `SharesMemory`).
/// 5. A worker's push of `min_ipc_answer_bytes` or more sent with `link::send_partition`
///    (`transport::StagesPartitions`: the worker sends a partition again only once the server
///    answered it) is copied into that partition's own slot of shared memory
///    (transport/ipc/ipc_partition_slots.hpp), shared as in 4., and goes by reference: never
///    into the ring, whose space a push read in place holds until its round is summed, so a
///    worker ahead of the others would fill it and send the rest by TCP. A partition's first
///    pushes, while its slot is made and its slab offered, take the ring.
/// So ipc nodes work with plain ones (no handshake, no shortcut), and a same-host link with
/// `options::enabled` off (`BYTEPS_ENABLE_IPC=0`) behaves exactly like the inner transport.
///
/// A ring's name (`/bps-ipc-<creator pid>-<random>`) exists only from its creation until the
/// peer maps it. A process killed in that window leaves the name behind; every ipc transport
/// constructed later on the machine removes such names whose creator is no longer alive.
///
/// @par Contract kept
/// `on_sent` runs once per send, never inside `send`: a payload sent through the ring is copied
/// by the transport's copier thread (so a sender holding its own lock does not copy under it),
/// and its callback runs when the inner link sent its header. Frames a link sends while a copy
/// is queued queue behind it, so the link stays in order.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unistd.h>

#include <fmt/core.h>

#include "byteps/core/config.hpp"
#include "byteps/detail/shm_segment.hpp"
#include "byteps/detail/task_queue.hpp"
#include "byteps/transport/fwd.hpp"
#include "byteps/transport/ipc/ipc_messages.hpp"
#include "byteps/transport/ipc/ipc_options.hpp"
#include "byteps/transport/ipc/ipc_partition_slots.hpp"
#include "byteps/transport/ipc/ipc_ring.hpp"
#include "byteps/transport/ipc/ipc_shared.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {


template <class Inner>
class ipc {
  static_assert(Transport<Inner>, "ipc<Inner>: Inner must model bps::Transport");

 public:
  static constexpr std::string_view name = "ipc";
  static constexpr std::size_t min_ipc_bytes = 16 * 1024;
  /// The way back (server to worker) takes shared memory from this size on, and so do a worker's
  /// partitions (5. above) and a server's sums (server/shared_pool.hpp). At 64 KiB TCP was the
  /// faster way, against the ring and against the sums' place alike (why was not found); from
  /// 128 KiB on, shared memory is (docs/performance.md, "One machine: answers through shared
  /// memory" and "1 MiB on one machine").
  static constexpr std::size_t min_ipc_answer_bytes = 128 * 1024;
  /// Ring payloads up to this size are copied by the sending thread, larger ones by the copier.
  static constexpr std::size_t inline_copy_bytes = 256 * 1024;
  using options = ipc_options<typename Inner::options>;
  /// Receivers may get ring payloads in place (`in_place_receiver::takes_in_place`): a server whose
  /// handler reads pushes in place then hands it all its pushes whole (server/server.hpp).
  static constexpr bool hands_in_place = true;

  class link;

  /// With the options the environment gave (`options::from(cfg)`).
  explicit ipc(const Config& cfg) : ipc(cfg, options::from(cfg)) {}
  ipc(const Config& cfg, const options& opts)
      : inner_(cfg, opts.inner),
        enabled_(opts.enabled),
        ring_bytes_(ipc_detail::align_up(
            std::max<std::size_t>(4 * cfg.max_frame_bytes(), opts.ring_bytes))) {
    if (enabled_) ipc_detail::remove_orphan_rings();
  }

  std::uint16_t listen(const std::string& host, std::uint16_t port,
                       std::function<void(std::shared_ptr<link>)> on_accept) {
    return inner_.listen(host, port, [this, on_accept = std::move(on_accept)](auto l) {
      on_accept(std::make_shared<link>(std::move(l), *this, false));
    });
  }

  std::shared_ptr<link> connect(const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds timeout) {
    return std::make_shared<link>(inner_.connect(host, port, timeout), *this, true);
  }

  void register_memory(std::span<std::byte> memory) { inner_.register_memory(memory); }
  void stop() {
    inner_.stop();
    copier_.stop();  // what is queued meets a stopped inner transport: dropped, as after stop()
  }

  /// Payloads this transport has sent through shared memory so far (for tests and logs).
  std::uint64_t payloads_through_shm() const noexcept { return through_shm_.load(); }
  /// Payloads received through shared memory that a receiver took in place, so far (a
  /// server's pushes summed straight from a worker's ring; for tests and logs).
  std::uint64_t payloads_in_place() const noexcept { return in_place_.load(); }
  /// Whether the shared-memory shortcut is on (`options::enabled`, BYTEPS_ENABLE_IPC).
  bool shortcut_enabled() const noexcept { return enabled_; }

  /// `transport::SharesMemory`: payloads of at least `min_ipc_bytes` that lie whole in `memory`
  /// (this process's mapping of segment `name` from offset 0, 64-byte aligned) go to a peer on
  /// this host by reference, once the peer mapped the name: no copy into the ring, and a
  /// receiver that takes frames in place reads them where they lie. The caller keeps a
  /// payload's bytes unchanged until the peer is done with them (transport.hpp). An empty
  /// `memory` withdraws the name, before the caller unmaps it.
  void share_memory(const std::string& name, std::span<std::byte> memory) {
    shared_.share(name, memory);
  }
  /// Whether `share_memory` would be used: the shortcut is on.
  bool shares_memory() const noexcept { return enabled_; }
  /// Whether a peer on this host connected to this end (and was admitted) so far: one that
  /// could read what is shared. A server on a host of its own has none.
  bool peer_on_host() const noexcept { return peer_on_host_.load(std::memory_order_relaxed); }
  /// Payloads this transport has sent by reference into shared memory so far (for tests).
  std::uint64_t payloads_by_reference() const noexcept { return by_reference_.load(); }

 private:
  Inner inner_;
  bool enabled_;
  std::size_t ring_bytes_;
  std::atomic<std::uint64_t> through_shm_{0};
  std::atomic<std::uint64_t> in_place_{0};
  std::atomic<std::uint64_t> by_reference_{0};
  std::atomic<bool> peer_on_host_{false};
  ipc_detail::shared_regions shared_;
  ipc_detail::partition_slots slots_;  // a worker's pushes to a server on its host
  detail::task_thread copier_;  // last: joins first, while everything above still lives
};

}  // namespace bps::transport

#include "byteps/transport/ipc/impl/ipc_link.hpp"
