#pragma once
/// @file
/// A link of `transport::ipc` (transport/ipc/ipc.hpp): its handshake, its sends (through the inner
/// link, the ring, or by reference into memory shared by name) and its receiving end (`splice`),
/// which hands ring and shared payloads to the node where they lie or copies them out.
/// Included at the end of transport/ipc/ipc.hpp.

#include <unordered_map>

#include "byteps/transport/ipc/ipc.hpp"

namespace bps::transport {

template <class Inner>
class ipc<Inner>::link : public std::enable_shared_from_this<typename ipc<Inner>::link> {
 public:
  using inner_link = typename Inner::link;

  link(std::shared_ptr<inner_link> inner, ipc& owner, bool connecting)
      : inner_(std::move(inner)), owner_(&owner), connecting_(connecting) {}

  // The server announces ipc once the peer proved who it is (its hello), so a stranger
  // hears nothing of it and the worker's offer always follows its hello.
  void start(std::shared_ptr<receiver> node) {
    const bool admitted = node->capabilities().peer_admitted();
    inner_->start(
        std::make_shared<splice>(this->weak_from_this(), std::move(node), owner_->in_place_));
    if (admitted) announce();
  }

  void send(const wire::header& h, std::span<const std::byte> payload, sent_callback on_sent) {
    std::lock_guard lock(mu_);
    const bool by_shm =
        ring_ready_ && payload.size() >= (connecting_ ? min_ipc_bytes : min_ipc_answer_bytes);
    if (by_shm) {
      if (auto place = shared_place_locked(payload)) {
        // By reference: nothing to copy, but behind any copy still queued, so still in order.
        if (queued_ == 0) return send_shared_locked(h, *place, payload.size(), std::move(on_sent));
        ++queued_;
        owner_->copier_.post([self = this->shared_from_this(), h, place = *place,
                              bytes = payload.size(), on_sent = std::move(on_sent)]() mutable {
          std::lock_guard lock(self->mu_);
          --self->queued_;
          self->send_shared_locked(h, place, bytes, std::move(on_sent));
        });
        return;
      }
    }
    std::optional<std::uint64_t> pos;
    if (by_shm) pos = reserve(payload.size());
    if (!pos && queued_ == 0) return inner_->send(h, payload, std::move(on_sent));
    // A small copy costs less than waking the copier, so it is done here when nothing waits
    // (docs/performance.md, "Figures moved from code comments").
    if (pos && queued_ == 0 && payload.size() <= inline_copy_bytes) {
      std::memcpy(ring_data() + *pos % ring_capacity_, payload.data(), payload.size());
      return send_ring_locked(h, *pos, payload.size(), std::move(on_sent));
    }
    // A larger copy runs on the transport's copier thread, not on the sender's (which may hold
    // its own lock, as the communicator does); frames sent meanwhile queue behind it, in order.
    ++queued_;
    owner_->copier_.post(
        [self = this->shared_from_this(), h, payload, pos, on_sent = std::move(on_sent)]() mutable {
          if (pos)
            std::memcpy(self->ring_data() + *pos % self->ring_capacity_, payload.data(),
                        payload.size());
          std::lock_guard lock(self->mu_);
          --self->queued_;
          if (!pos) return self->inner_->send(h, payload, std::move(on_sent));
          self->send_ring_locked(h, *pos, payload.size(), std::move(on_sent));
        });
  }

  /// `transport::StagesPartitions`: a worker's push of partition (h.key, h.part), which it
  /// sends again only once the server answered this one. From `min_ipc_answer_bytes` on, on a
  /// link to a server on this host, it is copied into the partition's slot of shared memory
  /// and goes by reference (ipc.hpp, 5.); otherwise, and while the slot is being made and
  /// offered, as `send`.
  void send_partition(const wire::header& h, std::span<const std::byte> payload,
                      sent_callback on_sent) {
    {
      std::lock_guard lock(mu_);
      if (connecting_ && ring_ready_ && payload.size() >= min_ipc_answer_bytes &&
          !owner_->shared_.find(payload)) {
        auto slot = owner_->slots_.find(h.key, h.part, payload.size());
        if (slot.empty()) {
          // Made on the copier, not under the sender's lock: a new slab takes its pages now. A
          // partition whose slot is too small, or a transport refused memory, keeps `send`.
          if (owner_->slots_.could_make(h.key, h.part)) {
            owner_->copier_.post(
                [owner = owner_, key = h.key, part = h.part, bytes = payload.size()] {
                  owner->slots_.make(key, part, bytes,
                                     [owner](const std::string& path, std::span<std::byte> m) {
                                       owner->shared_.share(path, m);
                                     });
                });
          }
        } else if (auto place = shared_place_locked(slot)) {
          ++queued_;
          owner_->copier_.post([self = this->shared_from_this(), h, payload, slot, place = *place,
                                on_sent = std::move(on_sent)]() mutable {
            std::memcpy(slot.data(), payload.data(), payload.size());
            std::lock_guard lock(self->mu_);
            --self->queued_;
            self->send_shared_locked(h, place, payload.size(), std::move(on_sent));
          });
          return;
        }
      }
    }
    send(h, payload, std::move(on_sent));
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
  /// The inner link's answer (transport::TellsUnreadBytes).
  bool has_unread_bytes() { return transport::has_unread_bytes(*inner_); }

 private:
  // Receives for the node: handles the transport frames, and hands ring payloads over where
  // they lie or copies them out.
  class splice final : public receiver, public streaming_receiver, public peer_admission {
   public:
    splice(std::weak_ptr<link> owner, std::shared_ptr<receiver> node,
           std::atomic<std::uint64_t>& in_place)
        : owner_(std::move(owner)),
          node_(std::move(node)),
          node_caps_(node_->capabilities()),
          in_place_(&in_place) {}

    // The transport frames are its own; cut-through and admission are the node's, passed on.
    receiver_capabilities capabilities() override {
      return {.streaming = node_caps_.streaming != nullptr ? this : nullptr,
              .admission = node_caps_.admission != nullptr ? this : nullptr,
              .transport_frames = true};
    }
    bool peer_admitted() const override { return node_caps_.peer_admitted(); }

    std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
      if (wire::is_transport_msg(h.type)) {
        if (h.payload_bytes > max_control_bytes) {
          reason = fmt::format("an ipc control frame of {} bytes (at most {})", h.payload_bytes,
                               max_control_bytes);
          return {};
        }
        scratch_.resize(h.payload_bytes);
        return scratch_;
      }
      if (pending_) return {};  // its payload is in the ring; the wire carries none
      return node_->payload_destination(h, reason);
    }

    void on_message(const wire::header& h, std::span<std::byte> payload) override {
      if (wire::is_transport_msg(h.type)) {
        if (!node_caps_.peer_admitted())
          throw std::runtime_error(fmt::format("an ipc frame (type {:#x}) before its hello",
                                               static_cast<unsigned>(h.type)));
        return control(h, payload);
      }
      if (!pending_) {
        const bool admitted = node_caps_.peer_admitted();
        node_->on_message(h, payload);
        if (!admitted && node_caps_.peer_admitted())
          if (auto l = owner_.lock()) l->announce();
        return;
      }
      auto p = std::move(*pending_);
      pending_.reset();
      wire::header real = h;
      real.payload_bytes = p.bytes;
      if (p.shared) return deliver_shared(real, p);
      const auto [pos, bytes] = std::pair{p.pos, p.bytes};
      ring_->regions.take(pos, bytes);
      // A peer's payload off the alignment (not one this version sends) is copied out instead.
      if (ipc_detail::is_aligned(ring_->at(pos)) && node_caps_.takes_in_place(real)) {
        in_place_->fetch_add(1, std::memory_order_relaxed);
        return node_caps_.in_place->on_message_in_place(
            real, {ring_->at(pos), bytes}, std::make_shared<ipc_detail::ring_hold>(ring_, pos));
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
      return node_caps_.progress_step(h);
    }

    void on_progress(const wire::header& h, std::size_t bytes_in) override {
      node_caps_.streaming->on_progress(h, bytes_in);
    }

    void on_close(const std::string& reason) override {
      if (auto l = owner_.lock()) l->closed();
      node_->on_close(reason);
    }

   private:
    // A ring payload (`shared` null) or one in memory the peer shared: where it lies.
    struct pending_payload {
      std::uint64_t pos = 0;
      std::uint64_t bytes = 0;
      std::shared_ptr<const ipc_detail::shared_mapping> shared;
    };

    // A payload that lies in memory the peer shared: read where it lies, or copied out.
    void deliver_shared(const wire::header& real, pending_payload& p) {
      const auto bytes = p.shared->at(p.pos, p.bytes);
      if (ipc_detail::is_aligned(bytes.data()) && node_caps_.takes_in_place(real)) {
        in_place_->fetch_add(1, std::memory_order_relaxed);
        return node_caps_.in_place->on_message_in_place(real, bytes, std::move(p.shared));
      }
      std::string reason;
      auto dest = node_->payload_destination(real, reason);
      if (dest.size() != bytes.size())
        throw std::runtime_error(reason.empty() ? "no place for the payload" : reason);
      std::memcpy(dest.data(), bytes.data(), bytes.size());
      node_->on_message(real, dest);
    }

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
          const auto m = ipc_detail::decode_ring_offer(payload);
          if (!m.name.starts_with("/bps-ipc-") || m.bytes < 4096) return;
          ring_ = std::make_shared<ipc_detail::ring_reader>(
              detail::shm_segment(m.name, m.bytes, m.fingerprint, 2,
                                  std::chrono::steady_clock::now() + std::chrono::seconds(5),
                                  "ipc ring from " + l->peer()),
              m.bytes);
          next_pos_ = 0;
        } catch (const std::exception&) {
          return;
        }
        l->send_control(ipc_detail::ipc_accept, {});
        if (!l->connecting_) l->offer();  // the way back
        return;
      }
      if (h.type == ipc_detail::ipc_payload) {
        const auto m = ipc_detail::decode_ring_place(payload);
        if (!ring_ || m.bytes > ring_->capacity ||
            m.pos % ring_->capacity + m.bytes > ring_->capacity)
          throw std::runtime_error("ipc payload outside the ring");
        // Positions only grow (ring_regions frees by position).
        if (m.pos < next_pos_) throw std::runtime_error("ipc payload behind the previous one");
        next_pos_ = m.pos + m.bytes;
        pending_ = pending_payload{m.pos, m.bytes, nullptr};
        return;
      }
      if (h.type == ipc_detail::ipc_share) {
        // Map the peer's shared memory; refuse (no answer) when it cannot be mapped, or from a
        // peer that may not use shared memory: its payloads then come through the ring or the
        // inner link.
        if (!l->owner_->enabled_ || !l->same_host() || shared_.size() >= max_shared_regions) return;
        std::uint64_t id = 0;
        try {
          const auto m = ipc_detail::decode_share_offer(payload);
          shared_[m.id] = std::make_shared<const ipc_detail::shared_mapping>(m.name, m.bytes);
          id = m.id;
        } catch (const std::exception&) {
          return;
        }
        return l->send_control(ipc_detail::ipc_share_accept,
                               ipc_detail::encode(ipc_detail::share_accept{id}));
      }
      if (h.type == ipc_detail::ipc_share_accept)
        return l->share_accepted(ipc_detail::decode_share_accept(payload).id);
      if (h.type == ipc_detail::ipc_shared_payload) {
        const auto m = ipc_detail::decode_shared_payload(payload);
        auto it = shared_.find(m.id);
        if (it == shared_.end())
          throw std::runtime_error(
              fmt::format("ipc payload in shared memory {} that the peer "
                          "never shared (or this end could not map)",
                          m.id));
        if (it->second->at(m.offset, m.bytes).empty())
          throw std::runtime_error(
              fmt::format("ipc payload of {} bytes at {} outside the shared "
                          "memory {}",
                          m.bytes, m.offset, m.id));
        pending_ = pending_payload{m.offset, m.bytes, it->second};
      }
      // Other transport frames: a newer peer's; ignored.
    }

    std::weak_ptr<link> owner_;
    std::shared_ptr<receiver> node_;
    receiver_capabilities node_caps_;       // node_'s, asked once
    std::atomic<std::uint64_t>* in_place_;  // the transport's count
    std::vector<std::byte> scratch_;
    // A control frame's payload is a few numbers and a name.
    static constexpr std::size_t max_control_bytes = 4096;
    // The peer's ring, once offered; shared with the payloads the node holds in place.
    std::shared_ptr<ipc_detail::ring_reader> ring_;
    std::uint64_t next_pos_ = 0;  // where the next ring payload may start
    // Mappings a peer may make this end hold (each costs one of the process's mappings).
    static constexpr std::size_t max_shared_regions = 16384;
    // The memory the peer shared, by its id; shared with the payloads the node holds in place.
    std::unordered_map<std::uint64_t, std::shared_ptr<const ipc_detail::shared_mapping>> shared_;
    std::optional<pending_payload> pending_;
  };

  bool same_host() const { return ipc_detail::same_host(inner_->peer(), inner_->local_host()); }

  void announce() {
    if (connecting_ || !owner_->enabled_ || !same_host()) return;
    owner_->peer_on_host_.store(true, std::memory_order_relaxed);
    send_control(ipc_detail::ipc_able, {});
  }

  // A control frame with its typed payload (transport/ipc/ipc_messages.hpp), or none.
  void send_control(wire::msg type, std::vector<std::byte> payload = {}) {
    wire::header h;
    h.type = type;
    auto body = std::make_shared<std::vector<std::byte>>(std::move(payload));
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
    send_control(ipc_detail::ipc_offer,
                 ipc_detail::encode(ipc_detail::ring_offer{
                     .name = name, .bytes = bytes, .fingerprint = fingerprint}));
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

  // Holding mu_. Where `payload` lies in memory shared with the peer, once the peer mapped it;
  // offers the memory the first time a payload lies in it.
  std::optional<ipc_detail::shared_place> shared_place_locked(std::span<const std::byte> payload) {
    if (!ipc_detail::is_aligned(payload.data())) return std::nullopt;
    auto place = owner_->shared_.find(payload);
    if (!place) return std::nullopt;
    auto [it, fresh] = shares_.try_emplace(place->id, false);
    if (fresh)
      if (auto named = owner_->shared_.name_of(place->id))
        send_control(ipc_detail::ipc_share,
                     ipc_detail::encode(ipc_detail::share_offer{
                         .id = place->id, .name = named->name, .bytes = named->bytes}));
    if (!it->second) return std::nullopt;
    return place;
  }

  void share_accepted(std::uint64_t id) {
    std::lock_guard lock(mu_);
    if (auto it = shares_.find(static_cast<std::uint32_t>(id)); it != shares_.end())
      it->second = true;
  }

  // Holding mu_, a payload that lies in shared memory: its place, then its header with no
  // payload, adjacent on the inner link.
  void send_shared_locked(const wire::header& h, ipc_detail::shared_place place, std::size_t bytes,
                          sent_callback on_sent) {
    wire::header marker;
    marker.type = ipc_detail::ipc_shared_payload;
    auto body = std::make_shared<std::vector<std::byte>>(ipc_detail::encode(
        ipc_detail::shared_payload{.id = place.id, .offset = place.offset, .bytes = bytes}));
    inner_->send(marker, *body, [body] {});
    inner_->send(h, {}, std::move(on_sent));
    owner_->by_reference_.fetch_add(1);
  }

  // Holding mu_, the payload copied to ring position `pos`: its marker, then its header with
  // no payload, adjacent on the inner link.
  void send_ring_locked(const wire::header& h, std::uint64_t pos, std::size_t bytes,
                        sent_callback on_sent) {
    wire::header marker;
    marker.type = ipc_detail::ipc_payload;
    auto body = std::make_shared<std::vector<std::byte>>(
        ipc_detail::encode(ipc_detail::ring_place{.pos = pos, .bytes = bytes}));
    inner_->send(marker, *body, [body] {});
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
  std::unordered_map<std::uint32_t, bool> shares_;  // shared memory offered: whether mapped
};

}  // namespace bps::transport
