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
///    takes the frame in place (`receiver::takes_in_place`: a server's push, which its handler
///    sums straight from the ring) gets the bytes where they lie, and the ring space is freed
///    when the node lets go of them, in whatever order; otherwise the receiver copies them out
///    into the destination its node names (an answer: the worker's own tensor) and frees the
///    space at once. A payload that does not fit goes by the inner link, as before the
///    handshake. Each direction starts using its ring once its `ipc_accept` came back.
///    Answers take the ring from `min_ipc_answer_bytes` (256 KiB) on, pushes from
///    `min_ipc_bytes` (16 KiB).
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

#include <fmt/format.h>

#include "byteps/core/config.hpp"
#include "byteps/detail/shm_segment.hpp"
#include "byteps/detail/task_queue.hpp"
#include "byteps/transport/ipc_options.hpp"
#include "byteps/transport/ipc_ring.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {


template <Transport Inner>
class ipc {
 public:
  static constexpr std::string_view name = "ipc";
  static constexpr std::size_t min_ipc_bytes = 16 * 1024;
  /// The way back (server to worker) takes the ring from this size on. Smaller answers went
  /// faster by TCP (loopback, 2 workers + 2 servers, 64 KiB: p50 283-317 us through the ring
  /// against 212-286 us by TCP, alternated on an idle machine; why was not found), and larger
  /// ones faster through the ring (1 MiB: 459-556 us against 1004-1130).
  static constexpr std::size_t min_ipc_answer_bytes = 256 * 1024;
  /// Ring payloads up to this size are copied by the sending thread, larger ones by the copier.
  static constexpr std::size_t inline_copy_bytes = 256 * 1024;
  using options = ipc_options<typename Inner::options>;
  /// Receivers may get ring payloads in place (`receiver::takes_in_place`): a server whose
  /// handler reads pushes in place then hands it all its pushes whole (server/server.hpp).
  static constexpr bool hands_in_place = true;

  class link;

  /// With the options the environment gave (`options::from(cfg)`).
  explicit ipc(const Config& cfg) : ipc(cfg, options::from(cfg)) {}
  ipc(const Config& cfg, const options& opts)
      : inner_(cfg, opts.inner),
        enabled_(opts.enabled),
        ring_bytes_(ipc_detail::align_up(
            std::max<std::size_t>(4 * cfg.max_frame_bytes(), 16u << 20))) {
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

  class link : public std::enable_shared_from_this<link> {
   public:
    using inner_link = typename Inner::link;

    link(std::shared_ptr<inner_link> inner, ipc& owner, bool connecting)
        : inner_(std::move(inner)), owner_(&owner), connecting_(connecting) {}

    // The server announces ipc once the peer proved who it is (its hello), so a stranger
    // hears nothing of it and the worker's offer always follows its hello.
    void start(std::shared_ptr<receiver> node) {
      const bool admitted = node->peer_admitted();
      inner_->start(
          std::make_shared<splice>(this->weak_from_this(), std::move(node), owner_->in_place_));
      if (admitted) announce();
    }

    void send(const wire::header& h, std::span<const std::byte> payload, sent_callback on_sent) {
      std::lock_guard lock(mu_);
      std::optional<std::uint64_t> pos;
      if (ring_ready_ && payload.size() >= (connecting_ ? min_ipc_bytes : min_ipc_answer_bytes))
        pos = reserve(payload.size());
      if (!pos && queued_ == 0) return inner_->send(h, payload, std::move(on_sent));
      // A small copy costs less than waking the copier (loopback, 2 workers + 2 servers, 64 KiB:
      // p50 371-388 us through the copier, 321-331 us copied here), so it is done here when
      // nothing waits.
      if (pos && queued_ == 0 && payload.size() <= inline_copy_bytes) {
        std::memcpy(ring_data() + *pos % ring_capacity_, payload.data(), payload.size());
        return send_ring_locked(h, *pos, payload.size(), std::move(on_sent));
      }
      // A larger copy runs on the transport's copier thread, not on the sender's (which may hold
      // its own lock, as the communicator does); frames sent meanwhile queue behind it, in order.
      ++queued_;
      owner_->copier_.post([self = this->shared_from_this(), h, payload, pos,
                            on_sent = std::move(on_sent)]() mutable {
        if (pos) std::memcpy(self->ring_data() + *pos % self->ring_capacity_, payload.data(),
                             payload.size());
        std::lock_guard lock(self->mu_);
        --self->queued_;
        if (!pos) return self->inner_->send(h, payload, std::move(on_sent));
        self->send_ring_locked(h, *pos, payload.size(), std::move(on_sent));
      });
    }

    void close() { inner_->close(); }
    /// True once this end's payloads of at least `min_ipc_bytes` may take shared memory (the
    /// peer mapped this end's ring); false on a plain or a cross-host link.
    bool through_shm() {
      std::lock_guard lock(mu_);
      return ring_ready_;
    }
    std::string peer() const { return inner_->peer(); }
    std::string local_host() const { return inner_->local_host(); }

   private:
    // Receives for the node: handles the transport frames, and hands ring payloads over where
    // they lie or copies them out.
    class splice final : public receiver {
     public:
      splice(std::weak_ptr<link> owner, std::shared_ptr<receiver> node,
             std::atomic<std::uint64_t>& in_place)
          : owner_(std::move(owner)), node_(std::move(node)), in_place_(&in_place) {}

      bool wants_transport_frames() const override { return true; }
      bool peer_admitted() const override { return node_->peer_admitted(); }

      std::span<std::byte> payload_destination(const wire::header& h,
                                               std::string& reason) override {
        if (wire::is_transport_msg(h.type)) {
          scratch_.resize(h.payload_bytes);
          return scratch_;
        }
        if (pending_) return {};  // its payload is in the ring; the wire carries none
        return node_->payload_destination(h, reason);
      }

      void on_message(const wire::header& h, std::span<std::byte> payload) override {
        if (wire::is_transport_msg(h.type)) {
          if (!node_->peer_admitted())
            throw std::runtime_error(fmt::format("an ipc frame (type {:#x}) before its hello",
                                                 static_cast<unsigned>(h.type)));
          return control(h, payload);
        }
        if (!pending_) {
          const bool admitted = node_->peer_admitted();
          node_->on_message(h, payload);
          if (!admitted && node_->peer_admitted())
            if (auto l = owner_.lock()) l->announce();
          return;
        }
        auto [pos, bytes] = *pending_;
        pending_.reset();
        wire::header real = h;
        real.payload_bytes = bytes;
        ring_->regions.take(pos, bytes);
        // A peer's payload off the alignment (not one this version sends) is copied out instead.
        if (ipc_detail::is_aligned(ring_->at(pos)) && node_->takes_in_place(real)) {
          in_place_->fetch_add(1, std::memory_order_relaxed);
          return node_->on_message_in_place(real, {ring_->at(pos), bytes},
                                            std::make_shared<ipc_detail::ring_hold>(ring_, pos));
        }
        std::string reason;
        auto dest = node_->payload_destination(real, reason);
        if (dest.size() == bytes) std::memcpy(dest.data(), ring_->at(pos), bytes);
        ring_->release(pos);
        if (dest.size() != bytes)
          throw std::runtime_error(reason.empty() ? "no place for the payload" : reason);
        node_->on_message(real, dest);
      }

      // Cut-through is the node's to ask, for payloads on the inner link. A ring payload is whole
      // when its header comes (the copier wrote it before sending the header): nothing to report.
      std::size_t progress_step(const wire::header& h) override {
        if (wire::is_transport_msg(h.type) || pending_) return 0;
        return node_->progress_step(h);
      }

      void on_progress(const wire::header& h, std::size_t bytes_in) override {
        node_->on_progress(h, bytes_in);
      }

      void on_close(const std::string& reason) override {
        if (auto l = owner_.lock()) l->closed();
        node_->on_close(reason);
      }

     private:
      void control(const wire::header& h, std::span<std::byte> payload) {
        auto l = owner_.lock();
        if (!l) return;
        if (h.type == ipc_detail::ipc_able) {
          if (l->connecting_) l->offer();
          return;
        }
        if (h.type == ipc_detail::ipc_accept) return l->accepted();
        if (h.type == ipc_detail::ipc_offer) {
          // Map the peer's ring; refuse (no answer) when it cannot be mapped: the link goes on.
          try {
            const std::string name(reinterpret_cast<const char*>(payload.data()), payload.size());
            if (!name.starts_with("/bps-ipc-") || h.tensor_bytes < 4096) return;
            ring_ = std::make_shared<ipc_detail::ring_reader>(
                detail::shm_segment(name, h.tensor_bytes, h.key, 2,
                                    std::chrono::steady_clock::now() + std::chrono::seconds(5),
                                    "ipc ring from " + l->peer()),
                h.tensor_bytes);
            next_pos_ = 0;
          } catch (const std::exception&) {
            return;
          }
          l->send_control(ipc_detail::ipc_accept, {});
          if (!l->connecting_) l->offer();  // the way back
          return;
        }
        if (h.type == ipc_detail::ipc_payload) {
          if (!ring_ || h.tensor_bytes > ring_->capacity ||
              h.offset % ring_->capacity + h.tensor_bytes > ring_->capacity)
            throw std::runtime_error("ipc payload outside the ring");
          // Positions only grow (ring_regions frees by position).
          if (h.offset < next_pos_) throw std::runtime_error("ipc payload behind the previous one");
          next_pos_ = h.offset + h.tensor_bytes;
          pending_ = std::pair{h.offset, h.tensor_bytes};
        }
        // Other transport frames: a newer peer's; ignored.
      }

      std::weak_ptr<link> owner_;
      std::shared_ptr<receiver> node_;
      std::atomic<std::uint64_t>* in_place_;  // the transport's count
      std::vector<std::byte> scratch_;
      // The peer's ring, once offered; shared with the payloads the node holds in place.
      std::shared_ptr<ipc_detail::ring_reader> ring_;
      std::uint64_t next_pos_ = 0;  // where the next ring payload may start
      std::optional<std::pair<std::uint64_t, std::uint64_t>> pending_;
    };

    bool same_host() const { return ipc_detail::same_host(inner_->peer(), inner_->local_host()); }

    void announce() {
      if (!connecting_ && owner_->enabled_ && same_host()) send_control(ipc_detail::ipc_able, {});
    }

    void send_control(wire::msg type, std::span<const std::byte> payload,
                      std::uint64_t bytes = 0, std::uint64_t fingerprint = 0) {
      wire::header h;
      h.type = type;
      h.tensor_bytes = bytes;
      h.key = fingerprint;
      auto body = std::make_shared<std::vector<std::byte>>(payload.begin(), payload.end());
      inner_->send(h, *body, [body] {});
    }

    // Make a ring for what this end sends and offer it: the worker when the server said it
    // speaks ipc, the server once it mapped the worker's ring (so answers take shared memory
    // too, and only ever to a peer that proved itself and offered first).
    void offer() {
      if (!owner_->enabled_ || !same_host()) return;
      std::lock_guard lock(mu_);
      if (ring_.mapped()) return;
      std::random_device random;
      const auto name = fmt::format("/bps-ipc-{}-{:08x}{:08x}", ::getpid(), random(), random());
      const std::size_t bytes = sizeof(ipc_detail::ring_control) + owner_->ring_bytes_;
      const std::uint64_t fingerprint = std::random_device{}();
      try {
        ring_ = detail::shm_segment(name, bytes, fingerprint, 2,
                                    std::chrono::steady_clock::now() + std::chrono::seconds(5),
                                    "ipc ring to " + peer());
      } catch (const std::exception&) {
        return;  // no shared memory here: stay on the inner link
      }
      ring_capacity_ = owner_->ring_bytes_;
      send_control(ipc_detail::ipc_offer, wire::as_bytes(name), bytes, fingerprint);
    }

    void accepted() {
      std::lock_guard lock(mu_);
      if (ring_.mapped()) ring_ready_ = true;
    }

    void closed() {
      std::lock_guard lock(mu_);
      ring_ready_ = false;
      ring_.unlink();  // if the peer never mapped it
    }

    std::byte* ring_data() const { return ring_.data() + sizeof(ipc_detail::ring_control); }

    // Holding mu_. Where a payload of `n` bytes goes, or nullopt when the ring is too full.
    std::optional<std::uint64_t> reserve(std::size_t n) {
      if (n > ring_capacity_) return std::nullopt;
      auto* control = reinterpret_cast<ipc_detail::ring_control*>(ring_.data());
      // Payloads start on a cache line, so a receiver summing one in place reads every dtype at
      // its natural alignment (the capacity is a multiple of the same).
      std::uint64_t pos = ipc_detail::align_up(head_);
      if (pos % ring_capacity_ + n > ring_capacity_) pos += ring_capacity_ - pos % ring_capacity_;
      if (pos + n - control->consumed.load(std::memory_order_acquire) > ring_capacity_)
        return std::nullopt;
      head_ = pos + n;
      return pos;
    }

    // Holding mu_, the payload copied to ring position `pos`: its marker, then its header with
    // no payload, adjacent on the inner link.
    void send_ring_locked(const wire::header& h, std::uint64_t pos, std::size_t bytes,
                          sent_callback on_sent) {
      wire::header marker;
      marker.type = ipc_detail::ipc_payload;
      marker.offset = pos;
      marker.tensor_bytes = bytes;
      inner_->send(marker, {}, {});
      inner_->send(h, {}, std::move(on_sent));
      owner_->through_shm_.fetch_add(1);
    }

    std::shared_ptr<inner_link> inner_;
    ipc* owner_;
    bool connecting_;
    std::mutex mu_;
    detail::shm_segment ring_;  // ours, for sending
    std::uint64_t ring_capacity_ = 0;
    std::uint64_t head_ = 0;
    std::size_t queued_ = 0;  // sends waiting on the copier
    bool ring_ready_ = false;
  };

 private:
  Inner inner_;
  bool enabled_;
  std::size_t ring_bytes_;
  std::atomic<std::uint64_t> through_shm_{0};
  std::atomic<std::uint64_t> in_place_{0};
  detail::task_thread copier_;  // last: joins first, while everything above still lives
};

}  // namespace bps::transport
