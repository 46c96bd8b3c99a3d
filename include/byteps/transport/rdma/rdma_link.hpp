#pragma once
/// @file
/// `bps::transport::rdma_link<V>` (`basic_rdma<V>::link`): one RC queue pair to one peer.
///
/// Memory: one registered slab per link: `rx_depth` receive slots, `start_depth` send slots,
/// and a staging area each way (rdma_options.hpp). Messages are those of rdma_messages.hpp.
///
/// Sending (any thread, under the link's lock): frames leave in order. A frame that fits a slot
/// goes as one SEND. A larger one is announced (SEND of its header); the receiver asks its
/// receiver for `payload_destination` and grants a target: the destination itself when it lies
/// in registered memory, else its staging area, a window at a time. The sender then writes the
/// payload by WRITE WITH IMM, from the payload itself when registered, else copied through its
/// staging area; `on_sent` runs on the last write's completion. One large frame is in flight per
/// direction; frames behind it wait (the receiver delivers in order anyway).
///
/// Cached places: when the receiver's `destination_stays` says a registered destination is the
/// place of every later frame of that (key, part, type, offset), its grant says so (`stays`), and
/// the sender keeps that (address, rkey). A later such frame no longer than it then goes at once
/// (a `direct` SEND of its header, then its WRITE WITH IMM), without announce or grant. Should
/// the receiver's destination have moved after all, it copies the bytes from the old place and
/// revokes it, and the sender asks again next time.
///
/// Credits: a SEND or a WRITE WITH IMM consumes one receive of the peer, so the sender holds one
/// credit per receive the peer posted, and every message returns the receives its sender
/// re-posted since the last one (a `credit` message does so alone once half are owed). The
/// last credit is kept for that message, so two ends can never both wait for credits. A
/// receive is re-posted only after its message was handled, so a returned credit never lets
/// the peer overwrite a slot still being read.
///
/// Receiving and every callback run on the transport's progress thread (basic_rdma.hpp), one
/// link's completions in order: receiver callbacks one at a time, in frame order; `on_close`
/// once, after the last `on_message`. A failed work request, a flushed queue, a refused frame or
/// a DISCONNECTED event closes the link with its reason; the process goes on. A link that ends
/// in the middle of a large frame adds how far it got ("... in the middle of a push frame (8192
/// of its 20000 payload bytes)"), logged at WARNING with the peer.
///
/// Before the receiver admits its peer (`peer_admission::peer_admitted`, false on a listener's link
/// until the hello), the peer may send frames, announces, credits and grants answering our
/// announces; a transport-range frame (a decorator's handshake), a direct frame, a revoke or a
/// grant nobody asked for closes the link, logged at WARNING with the peer ("dropping
/// connection from A: a transport frame (type 0xf001) before its hello"), as over TCP.

#include <fmt/core.h>

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/transport/rdma/rdma_messages.hpp"
#include "byteps/transport/rdma/rdma_options.hpp"
#include "byteps/transport/rdma/registry.hpp"
#include "byteps/transport/rdma/verbs.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {

template <class V>
class rdma_link_rx;

template <class V>
class rdma_link : public std::enable_shared_from_this<rdma_link<V>> {
 public:
  using id_type = typename V::cm_id;
  using post_fn = std::function<void(std::function<void()>)>;  // runs a task on the progress thread

  struct setup {
    V* verbs;
    typename V::device* dev;
    typename V::comp_channel* channel;
    const rdma_registry<V>* registry;
    std::size_t max_frame;
    logger log;
    post_fn post;
    rdma_msg::tally* tally;
  };

  template <class Opts>
  rdma_link(const setup& s, const Opts& o)
      : v_(*s.verbs),
        registry_(*s.registry),
        max_frame_(s.max_frame),
        log_(s.log),
        post_(s.post),
        tally_(*s.tally),
        rx_depth_(static_cast<std::uint32_t>(o.rx_depth)),
        sq_depth_(static_cast<std::uint32_t>(o.start_depth)),
        slot_(o.slot_bytes),
        staging_(o.staging_bytes),
        slab_(o.link_bytes()),
        dev_(s.dev) {
    for (std::uint32_t i = 0; i < sq_depth_; ++i) free_slots_.push_back(i);
    mr_ = v_.reg_mr(s.dev, slab_, verbs::local_write | verbs::remote_write);
    cq_ = v_.create_cq(s.dev, s.channel, static_cast<int>(rx_depth_ + sq_depth_));
  }
  rdma_link(const rdma_link&) = delete;
  rdma_link& operator=(const rdma_link&) = delete;
  ~rdma_link() { release(); }

  // ---- bps::TransportLink ----
  void start(std::shared_ptr<receiver> r) {
    post_([self = this->shared_from_this(), r = std::move(r)]() mutable {
      self->on_start(std::move(r));
    });
  }
  void send(const wire::header& h, std::span<const std::byte> payload, sent_callback on_sent) {
    std::unique_lock lock(mu_);
    if (closed_) {
      lock.unlock();  // still exactly once, and never inside send()
      if (on_sent) post_(std::move(on_sent));
      return;
    }
    wire::header copy = h;
    copy.payload_bytes = payload.size();
    outgoing f;
    f.h = copy;
    f.payload = payload;
    f.on_sent = std::move(on_sent);
    f.seq = next_seq_++;
    queue_.push_back(std::move(f));
    pump_or_fail(lock);
  }
  void close() {
    post_([self = this->shared_from_this()] { self->fail("closed locally"); });
  }
  const std::string& peer() const noexcept { return peer_; }
  const std::string& local_host() const noexcept { return local_host_; }

  // ---- the transport's side (progress thread) ----
  void attach(id_type* id, std::uint32_t peer_rx_depth) {
    id_ = id;
    peer_ = v_.peer_address(id);
    local_host_ = v_.local_host(id);
    credits_ = peer_rx_depth;
  }
  void create_qp_and_post_receives() {
    v_.create_qp(id_, dev_, cq_, {sq_depth_, rx_depth_});
    for (std::uint32_t i = 0; i < rx_depth_; ++i) post_receive(i);
  }
  typename V::cq* cq() const noexcept { return cq_; }
  id_type* id() const noexcept { return id_; }
  bool polling() const noexcept { return started_ || failed_; }
  /// Everything posted has completed since the link failed: its resources can go.
  bool drained() const { return failed_ && posted_recvs_ == 0 && sq_used_ == 0; }
  bool released() const noexcept { return released_; }

  /// Handles up to 32 completions; false when there were none.
  bool poll();

  /// Closes the link with `reason` (first reason only): queued frames are dropped (their
  /// on_sent runs; a frame whose writes are still posted gets it at their flushed completion),
  /// the queue pair goes to the error state, and the receiver hears `on_close`.
  void fail(const std::string& reason);

  /// Destroys the queue pair, the queue, the slab's region and the id. After `drained()`, or at
  /// the transport's stop whatever is left.
  void release() {
    if (released_) return;
    released_ = true;
    if (id_) {
      v_.destroy_qp(id_);
      v_.destroy_id(id_);
      id_ = nullptr;
    }
    if (cq_) v_.destroy_cq(cq_);
    if (mr_) v_.dereg_mr(mr_);
    cq_ = nullptr;
    mr_ = nullptr;
  }

 private:
  friend class rdma_link_rx<V>;
  static constexpr std::uint64_t tag_recv = 1ull << 56, tag_send = 2ull << 56,
                                 tag_write = 3ull << 56;

  struct outgoing {
    wire::header h;
    std::span<const std::byte> payload;
    sent_callback on_sent;
    std::uint64_t seq = 0;
    bool announced = false;
    std::deque<rdma_msg::grant> grants;  // granted targets not yet all posted, oldest first
    std::uint64_t grant_posted = 0;      // bytes of the oldest posted
    std::uint64_t written = 0;           // bytes of the payload whose write completed
    int writes_posted = 0;
  };

  std::byte* recv_slot(std::uint32_t i) { return slab_.data() + i * slot_; }
  std::byte* send_slot(std::uint32_t i) { return slab_.data() + (rx_depth_ + i) * slot_; }
  std::byte* rx_staging() { return slab_.data() + (rx_depth_ + sq_depth_) * slot_; }
  std::byte* tx_staging() { return rx_staging() + staging_; }
  std::size_t inline_limit() const { return slot_ - rdma_msg::prefix_size - wire::header_size; }

  void on_start(std::shared_ptr<receiver> r);
  void post_receive(std::uint32_t i) {
    v_.post_recv(id_,
                 {tag_recv | i, {recv_slot(i), static_cast<std::uint32_t>(slot_), v_.lkey(mr_)}});
    ++posted_recvs_;
  }

  // Sender side; all under mu_.
  bool can_post(std::uint32_t reserve) const { return credits_ > reserve && sq_used_ < sq_depth_; }
  // One SEND from a free send slot: the prefix, then `a` and `b` copied in.
  void post_message(rdma_msg::kind k, std::uint64_t seq, std::span<const std::byte> a,
                    std::span<const std::byte> b, sent_callback on_sent) {
    const auto slot = free_slots_.back();
    free_slots_.pop_back();
    std::byte* p = send_slot(slot);
    rdma_msg::put_prefix(p, {k, owed_, seq});
    if (!a.empty()) std::memcpy(p + rdma_msg::prefix_size, a.data(), a.size());
    if (!b.empty()) std::memcpy(p + rdma_msg::prefix_size + a.size(), b.data(), b.size());
    slot_callbacks_[slot] = std::move(on_sent);
    const auto length = static_cast<std::uint32_t>(rdma_msg::prefix_size + a.size() + b.size());
    v_.post_send(id_, {tag_send | slot, verbs::send_opcode::send, {p, length, v_.lkey(mr_)}});
    owed_ = 0;
    --credits_;
    ++sq_used_;
  }
  void pump();
  void pump_or_fail(std::unique_lock<std::mutex>& lock) {
    try {
      pump();
    } catch (const std::exception& e) {
      lock.unlock();
      post_([self = this->shared_from_this(), why = std::string(e.what())] {
        self->fail("posting to " + self->peer_ + " failed: " + why);
      });
    }
  }
  void on_grant(std::uint64_t seq, const rdma_msg::grant& g);
  // Whether a grant for frame `seq` answers our announce (the frame waiting for its grants).
  bool awaits_grant(std::uint64_t seq) {
    std::lock_guard lock(mu_);
    return !queue_.empty() && queue_.front().seq == seq && queue_.front().announced;
  }
  void on_revoke(const rdma_msg::place_id& id) {
    std::lock_guard lock(mu_);
    if (places_.erase(id) != 0) ++tally_.forgotten;
  }
  void on_send_done(std::uint64_t wr_id, bool ok);

  V& v_;
  const rdma_registry<V>& registry_;
  std::size_t max_frame_;
  logger log_;
  post_fn post_;
  rdma_msg::tally& tally_;
  std::uint32_t rx_depth_, sq_depth_;
  std::size_t slot_, staging_;
  std::vector<std::byte> slab_;
  typename V::device* dev_ = nullptr;
  typename V::mr* mr_ = nullptr;
  typename V::cq* cq_ = nullptr;
  id_type* id_ = nullptr;
  std::string peer_ = "unknown peer", local_host_ = "127.0.0.1";

  // Progress thread only.
  std::shared_ptr<receiver> receiver_;
  receiver_capabilities caps_;  // receiver_'s, asked once
  bool started_ = false, failed_ = false, released_ = false;
  std::string close_reason_;
  std::uint32_t posted_recvs_ = 0;
  std::unique_ptr<rdma_link_rx<V>> rx_;

  // Sender side, under mu_.
  std::mutex mu_;
  bool closed_ = false;
  std::uint32_t credits_ = 0, owed_ = 0, sq_used_ = 0;
  std::vector<std::uint32_t> free_slots_;
  std::map<std::uint32_t, sent_callback> slot_callbacks_;
  std::deque<std::pair<std::uint64_t, rdma_msg::grant>> grants_out_;  // (seq, grant) to send
  std::deque<rdma_msg::place_id> revokes_out_;                        // to send
  std::map<rdma_msg::place_id, rdma_msg::grant> places_;  // the peer's advertised places
  std::deque<outgoing> queue_;
  std::uint64_t next_seq_ = 1;
  struct posted_write {
    std::uint64_t length;
    bool staged;
  };
  std::deque<posted_write> writes_;  // posted, oldest first: one QP completes them in order
  bool tx_staging_busy_ = false;
};

}  // namespace bps::transport

#include "byteps/transport/rdma/impl/rdma_link_rx.hpp"
#include "byteps/transport/rdma/impl/rdma_link_tx.hpp"
