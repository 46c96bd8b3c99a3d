#pragma once
/// @file
/// `server::session`: a server's end of one worker link. It checks who the peer is: the first
/// frame must be `peer_hello`, proving the job's token for the nonce of the server's challenge
/// (rendezvous/auth.hpp, gate.hpp); anything else closes the link, logged by the server's gate.
/// Then it reads pushes into pooled buffers and hands each frame to its server, which decides
/// what the frame means and answers through it. A frame a worker may not send (a second
/// `peer_hello`, a push with another worker's rank, a type a server does not take, a malformed
/// declare) throws `wire::decode_error`, byteps's type for a peer that breaks the protocol: the
/// link closes.
///
/// `Owner` (the `Server`, which befriends this class) provides: `link_ptr`; `config()`;
/// `receive_buffer(bytes)` and `recycle(buffer)` (its buffer pool); `gate()` (its
/// `rendezvous::hello_gate`); `places()` (its `worker_places`: one link per worker process);
/// `now_ns()` (the timeline's clock, 0 when tracing is off); `declare(session&, key, payload)`
/// (wire/declare.hpp); `post_push(session_ptr, header, arriving_push, receive_times)`, the one
/// way every push and sum_offer goes to the server, however its bytes came;
/// `post_rows(session_ptr, header, buffer)`, an embedding table's request (server/tables.hpp);
/// `worker_lost(session&, reason, mid_frame)` (mid_frame: the close cut a frame);
/// `worker_failed(session&, why)` (its bye said it left after a failure). For cut-through:
/// `streams(bytes)` (is a push of that size streamed) and `shared_receive_buffer(bytes)`; a
/// streamed push goes to `post_push` chunk by chunk, lent. For landed pushes (RDMA,
/// server/landing.hpp): `lands_pushes()` and `landing_buffer(bytes)` (null past the budget); a
/// landed push goes lent and whole, in one call (or chunk by chunk when it also streams). For
/// pushes read in place (a colocated worker's ipc ring, `in_place_receiver::takes_in_place`):
/// `takes_in_place()`; a push in the ring then goes lent and whole, owned by the ring's hold,
/// and every other push of the link lent and whole in a buffer of its own (or chunk by chunk
/// when it streams), so that a key gets all its pushes the same way.
///
/// @par Thread Safety
/// The callbacks run on the link's I/O thread, one at a time (the transport's rule). `link`,
/// `worker` and `said_bye` are read from other threads once `peer_hello` was handled.

#include <fmt/core.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byteps/core/keys.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/rendezvous/gate.hpp"
#include "byteps/rendezvous/messages.hpp"
#include "byteps/server/batch_split.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/server/landing.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/codec.hpp"
#include "byteps/wire/declare.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

/// Timeline: when a push's frame began to arrive and when it was in (0 with tracing off).
struct receive_times {
  std::int64_t began_ns = 0, arrived_ns = 0;
};

/// A push as a session hands it to its server: lent by the link (streamed, landed or in
/// place), or whole in `buffer`, a buffer of the server's pool (`whole`).
struct arriving_push {
  payload_ref lent;
  std::size_t bytes_in = 0;  ///< lent: the first `bytes_in` bytes are in
  bool first = true, complete = true;
  detail::buffer_pool::buffer buffer;  ///< whole: the push; lent: empty
  bool in_buffer = false;

  static arriving_push whole(detail::buffer_pool::buffer b) {
    arriving_push p;
    p.buffer = std::move(b);
    p.in_buffer = true;
    return p;
  }
  std::size_t size() const noexcept { return in_buffer ? buffer.size : lent.bytes.size(); }
  /// The handler's view; `buffer` stays here, for the server to give back after.
  push_bytes bytes() {
    return in_buffer ? push_bytes::in(buffer) : push_bytes::lent(lent, bytes_in, first, complete);
  }
};

template <class Owner>
class session final : public transport::receiver,
                      public transport::streaming_receiver,
                      public transport::cached_destinations,
                      public transport::in_place_receiver,
                      public transport::peer_admission,
                      public std::enable_shared_from_this<session<Owner>> {
 public:
  using link_ptr = typename Owner::link_ptr;

  session(Owner* owner, link_ptr l, std::shared_ptr<rendezvous::pending_hello> t)
      : link(std::move(l)), owner_(owner), ticket_(std::move(t)) {}

  // Cut-through, the gate, and where the server's transport has them, landed pushes (RDMA)
  // and pushes read in place (ipc).
  transport::receiver_capabilities capabilities() override {
    return {.streaming = this,
            .cached = owner_->lands_pushes() ? this : nullptr,
            .in_place = owner_->takes_in_place() ? this : nullptr,
            .admission = this};
  }

  std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
    auto to = destination(h, reason);
    mid_frame_ = !to.empty();  // until on_message: a close now cuts this frame
    return to;
  }

 private:
  std::span<std::byte> destination(const wire::header& h, std::string& reason) {
    if (worker < 0 && h.type != wire::msg::peer_hello) {
      reason = fmt::format("it sent a {} frame of {} bytes before its peer_hello",
                           wire::msg_name(h.type), h.payload_bytes);
      owner_->gate().refused(*ticket_, reason);
      return {};
    }
    switch (h.type) {
      case wire::msg::peer_hello:
        if (h.payload_bytes != rendezvous::proof_bytes) {
          reason = fmt::format("a peer_hello of {} bytes (its proof has {})", h.payload_bytes,
                               rendezvous::proof_bytes);
          owner_->gate().refused(*ticket_, reason);
          return {};
        }
        small_.resize(h.payload_bytes);
        return small_;
      case wire::msg::bye:
        if (h.payload_bytes > max_bye_bytes) {
          reason = fmt::format("a bye of {} bytes (at most {})", h.payload_bytes, max_bye_bytes);
          return {};
        }
        small_.resize(h.payload_bytes);
        return small_;
      case wire::msg::push:
        if (worker < 0) {
          reason = "push before peer_hello";
          return {};
        }
        received_ns_ = owner_->now_ns();
        landed_ = false;
        {
          // A compressed push is decoded whole, and a refused key's push is not summed at all,
          // so neither streams; the common case pays the flag test and an empty() only.
          const bool refused = !refused_.empty() && refused_.contains(h.key);
          chunked_ = (h.flags & wire::flag_compressed) == 0 && owner_->streams(h.payload_bytes) &&
                     !refused;
          if (owner_->lands_pushes() && !refused) {  // RDMA: the partition's landing buffer
            streaming_ = landing_.take(key_id{h.key, h.part}, h.payload_bytes,
                                       [this](std::size_t n) { return owner_->landing_buffer(n); });
            landed_ = streaming_ != nullptr;
            // Past the landing budget: a buffer of its own, still handed over as a landed push,
            // so that every push of a key reaches the handler the same way.
            if (!landed_) streaming_ = owner_->shared_receive_buffer(h.payload_bytes);
            first_ = true;
            streaming_bytes_ = h.payload_bytes;
            return streaming_->span().first(h.payload_bytes);
          }
          // Pushes read in place: one that came by the link is handed over as if it had.
          if (chunked_ || (owner_->takes_in_place() && !refused)) {
            streaming_ = owner_->shared_receive_buffer(h.payload_bytes);
            streaming_bytes_ = h.payload_bytes;
            first_ = true;
            return streaming_->span();
          }
        }
        incoming_ = owner_->receive_buffer(h.payload_bytes);
        return incoming_.span();
      case wire::msg::sum_offer:
        if (!owner_->config().failover()) {
          reason = "sum_offer while failover is off";
          return {};
        }
        if (worker < 0) {
          reason = "sum_offer before peer_hello";
          return {};
        }
        incoming_ = owner_->receive_buffer(h.payload_bytes);
        return incoming_.span();
      case wire::msg::rows_request:  // an embedding table's (server/tables.hpp)
        if (worker < 0) {
          reason = "rows_request before peer_hello";
          return {};
        }
        incoming_ = owner_->receive_buffer(h.payload_bytes);
        return incoming_.span();
      case wire::msg::push_batch:  // tensor fusion: server/batch_split.hpp
        if (!server::batch_fits(h, reason)) return {};
        batch_.resize(h.payload_bytes);
        return batch_;
      case wire::msg::declare:
        if (h.payload_bytes > wire::max_declare_bytes) {
          reason = fmt::format("declare of {} bytes (at most {})", h.payload_bytes,
                               wire::max_declare_bytes);
          return {};
        }
        small_.resize(h.payload_bytes);
        return small_;
      default:
        if (h.payload_bytes != 0)
          reason = fmt::format("unexpected {} frame", wire::msg_name(h.type));
        return {};
    }
  }

 public:
  // A push in a colocated worker's ring is summed where it lies (a refused key's is copied out
  // and answered with its error, in on_message).
  bool takes_in_place(const wire::header& h) override {
    return h.type == wire::msg::push && worker >= 0 && owner_->takes_in_place() &&
           (refused_.empty() || !refused_.contains(h.key));
  }
  void on_message_in_place(const wire::header& h, std::span<const std::byte> payload,
                           std::shared_ptr<const void> keep) override {
    if (h.sender != static_cast<std::uint32_t>(worker))
      throw wire::decode_error("push with another worker's rank");
    const auto now = owner_->now_ns();
    owner_->post_push(
        this->shared_from_this(), h,
        arriving_push{{payload, std::move(keep)}, payload.size(), true, true, {}, false},
        receive_times{now, now});
  }

  // Cut-through: a streamed push is handed to the server chunk by chunk as it arrives.
  std::size_t progress_step(const wire::header& h) override {
    return h.type == wire::msg::push && streaming_ && chunked_
               ? server::chunk_for(owner_->config().server_chunk_bytes, h.payload_bytes)
               : 0;
  }
  // RDMA: a push that landed in its partition's landing buffer lands there next round too.
  bool destination_stays(const wire::header& h, std::span<const std::byte> dest) override {
    return landed_ && h.type == wire::msg::push &&
           landing_.holds(key_id{h.key, h.part}, dest.data());
  }
  void on_progress(const wire::header& h, std::size_t bytes_in) override {
    if (h.sender != static_cast<std::uint32_t>(worker))
      throw wire::decode_error("push with another worker's rank");
    owner_->post_push(
        this->shared_from_this(), h,
        arriving_push{streamed(), bytes_in, std::exchange(first_, false), false, {}, false},
        receive_times{received_ns_, 0});
  }

  void on_message(const wire::header& h, std::span<std::byte> payload) override {
    mid_frame_ = false;
    if (worker < 0 && h.type != wire::msg::peer_hello) {  // a frame without payload
      owner_->gate().refused(*ticket_, fmt::format("it sent a {} frame before its peer_hello",
                                                   wire::msg_name(h.type)));
      return link->close();
    }
    switch (h.type) {
      case wire::msg::peer_hello:
        if (worker >= 0) throw wire::decode_error("a second peer_hello on one link");
        return hello(h, payload);
      case wire::msg::declare:
        return owner_->declare(*this, h.key, payload);  // throws for a malformed payload
      case wire::msg::push:
      case wire::msg::sum_offer:
        // An empty sum_offer gets here past payload_destination's refusal (a link refuses only
        // frames with a payload), and incoming_ holds no buffer for it: refused here as well.
        if (h.type == wire::msg::sum_offer && !owner_->config().failover())
          throw wire::decode_error("sum_offer while failover is off");
        if (h.sender != static_cast<std::uint32_t>(worker))
          throw wire::decode_error(
              fmt::format("{} with another worker's rank", wire::msg_name(h.type)));
        if (!refused_.empty()) {
          if (auto it = refused_.find(h.key); it != refused_.end()) {
            streaming_.reset();
            owner_->recycle(std::move(incoming_));
            return send_error(h, it->second, wire::flag_usage);
          }
        }
        if (streaming_) {
          auto in = streamed();
          streaming_.reset();
          const std::size_t size = in.bytes.size();
          return owner_->post_push(this->shared_from_this(), h,
                                   arriving_push{std::move(in), size, first_, true, {}, false},
                                   receive_times{received_ns_, owner_->now_ns()});
        }
        return owner_->post_push(this->shared_from_this(), h,
                                 arriving_push::whole(std::move(incoming_)),
                                 receive_times{received_ns_, owner_->now_ns()});
      case wire::msg::push_batch:  // each record as its own push frame
        return server::take_push_batch(*this, h, payload, owner_->config().fusion_bytes);
      case wire::msg::rows_request:
        if (h.sender != static_cast<std::uint32_t>(worker))
          throw wire::decode_error("rows_request with another worker's rank");
        return owner_->post_rows(this->shared_from_this(), h, std::move(incoming_));
      case wire::msg::bye:
        said_bye = true;
        // A worker that leaves after a failure says why (worker/node.hpp): the job failed.
        if (!payload.empty())
          owner_->worker_failed(
              *this, std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
        return;
      default:
        throw wire::decode_error(
            fmt::format("unexpected {} frame from a worker", wire::msg_name(h.type)));
    }
  }

  void on_close(const std::string& reason) override {
    owner_->recycle(std::move(incoming_));
    streaming_.reset();
    landing_.clear();
    // A connection that never said peer_hello is no worker (a stray client, a port scan): the
    // gate logs it, once, as a peer.
    if (worker < 0) return owner_->gate().closed(*ticket_, reason);
    owner_->places().release(worker, local_rank);
    if (!said_bye) owner_->worker_lost(*this, reason, mid_frame_);
  }

  bool peer_admitted() const override { return worker >= 0; }

  /// Sends `a` as the `pull_response` about `about`'s partition. Any thread.
  void send_answer(const wire::header& about, const reply& a) { send_pull_response(about, a, 0); }

  /// Sends `a` as a piece of the answer about `about`'s partition (cut-through); `last` ends it.
  void send_piece(const wire::header& about, const reply& a, bool last) {
    send_pull_response(about, a, wire::flag_piece | (last ? wire::flag_last_piece : 0u));
  }

  /// Elastic training: asks this worker to push `about`'s partition of round `about.round`
  /// again (its round started over without a removed worker). Any thread.
  void send_redo(const wire::header& about) {
    wire::header r;
    r.type = wire::msg::redo;
    r.key = about.key;
    r.part = about.part;
    r.round = about.round;
    link->send(r, {}, {});
  }

  /// Elastic training: tells this worker, as a fatal error, that it is no longer in the job and
  /// why, then closes the link. Any thread.
  void send_removal(const std::string& why) {
    auto body = std::make_shared<std::string>(why);
    wire::header r;
    r.type = wire::msg::error;
    r.flags = wire::flag_fatal;
    r.part = 0xffffffffu;  // about no partition
    link->send(r, wire::as_bytes(*body), [body, l = link] { l->close(); });
  }

  /// Sends `a` as the `rows_answer` to the table request `about`. Any thread.
  void send_rows_answer(const wire::header& about, const reply& a) {
    wire::header r;
    r.type = wire::msg::rows_answer;
    r.key = about.key;
    r.part = about.part;
    r.round = about.round;
    r.dtype = static_cast<std::uint32_t>(a.type);
    if (a.keep)
      link->send(r, a.bytes, [keep = a.keep] {});
    else
      link->send(r, a.bytes, {});
  }

  /// Sends `text` as an error about `about`'s partition and round. Any thread.
  void send_error(const wire::header& about, const std::string& text, std::uint32_t flags) {
    auto body = std::make_shared<std::string>(text);
    wire::header r;
    r.type = wire::msg::error;
    r.flags = flags;
    r.key = about.key;
    r.part = about.part;
    r.round = about.round;
    link->send(r, wire::as_bytes(*body), [body] {});
  }

  /// I/O thread (the declare's): this worker's pushes of `key` are refused with `why` from now
  /// on (its declare was: another compressor, or one the server cannot make).
  void refuse_key(std::uint64_t key, std::string why) { refused_.emplace(key, std::move(why)); }

  std::string describe() const {
    return worker >= 0 ? fmt::format("worker {} at {}", worker, link->peer())
                       : fmt::format("a peer at {}", link->peer());
  }

  link_ptr link;
  int worker = -1;
  int local_rank = 0;  ///< of the worker's machine, from its peer_hello
  /// While a push_batch of this link is handled: where the answers ready meanwhile gather
  /// (server/batch_split.hpp). I/O thread only; null otherwise.
  server::answer_batches<session>* batching = nullptr;
  std::atomic<bool> said_bye{false};

  /// The longest reason a worker's `bye` may carry.
  static constexpr std::size_t max_bye_bytes = 65536;

 private:
  // The first frame: it proves the token for this link's nonce, for the machine and local rank
  // it names, and takes that place (one link per worker process).
  void hello(const wire::header& h, std::span<const std::byte> payload) {
    const auto& cfg = owner_->config();
    std::string why;
    if (h.sender >= static_cast<std::uint32_t>(cfg.worker_slots()))
      why = fmt::format("a peer_hello for machine {}, but the job has {} ({})", h.sender,
                        cfg.worker_slots(),
                        cfg.max_workers > cfg.num_workers ? "BYTEPS_MAX_NUM_WORKER"
                                                          : "DMLC_NUM_WORKER");
    else if (!owner_->is_member(static_cast<int>(h.sender)))
      why = fmt::format("a peer_hello for machine {}, which is not in the job (elastic training: "
                        "it was removed, or has not joined yet)",
                        h.sender);
    else if (h.part >= 1024)
      why = fmt::format("a peer_hello for local rank {} (at most 1023)", h.part);
    else if (!rendezvous::verify_peer_hello(cfg.job_token, ticket_->challenge(), h.sender, h.part,
                                            payload))
      why =
          "a peer_hello that does not prove this job's BYTEPS_JOB_TOKEN for this link (a "
          "process of another job, a stranger, or a replayed hello)";
    if (!why.empty()) {
      owner_->gate().refused(*ticket_, why);
      return link->close();
    }
    worker = static_cast<int>(h.sender);
    local_rank = static_cast<int>(h.part);
    if (auto taken =
            owner_->places().claim(worker, local_rank, link->peer(), this->weak_from_this())) {
      worker = -1;
      owner_->gate().refused(*ticket_, *taken);
      return link->close();
    }
    owner_->gate().passed(*ticket_);
  }

  void send_pull_response(const wire::header& about, const reply& a, std::uint32_t flags) {
    const wire::header r = server::pull_response_header(about, a, flags);
    if (a.keep)
      link->send(r, a.bytes, [keep = a.keep] {});
    else
      link->send(r, a.bytes, {});
  }

  server::payload_ref streamed() const {
    return {std::span<const std::byte>(streaming_->span().first(streaming_bytes_)), streaming_};
  }

  Owner* owner_;
  detail::buffer_pool::buffer incoming_;  // I/O thread only
  /// I/O thread only: the streamed push being read, shared with the handler that sums it
  /// or landed in its partition's landing buffer (its first streaming_bytes_ bytes)
  std::shared_ptr<detail::buffer_pool::buffer> streaming_;
  std::size_t streaming_bytes_ = 0;
  bool first_ = false;      // streaming_ has not been handed over yet
  bool mid_frame_ = false;  // a payload is coming in: a close now cuts the frame
  bool chunked_ = false;    // the push is summed chunk by chunk as it arrives (progress_step)
  bool landed_ = false;     // the push lands in landing_ (RDMA; its place stays)
  server::landing_places landing_;  // I/O thread only
  std::int64_t received_ns_ = 0;    // timeline: when incoming_'s frame began
  std::vector<std::byte> small_;
  std::vector<std::byte> batch_;  // I/O thread only: a push_batch (not pooled: sizes vary)
  std::shared_ptr<rendezvous::pending_hello> ticket_;       // until peer_hello proved the token
  std::unordered_map<std::uint64_t, std::string> refused_;  // I/O thread only: key -> why
};

}  // namespace bps::server
