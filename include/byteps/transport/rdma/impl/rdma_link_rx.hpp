#pragma once
/// @file
/// `rdma_link_rx<V>`: the receiving side of one `rdma_link<V>`, on the progress thread. It
/// reads each message from its receive slot, asks the receiver where a payload goes before any
/// payload byte lands, grants that place to the sender (or its staging area, a window at a
/// time, when the place is not registered), and delivers the frame once the last write is in.
/// A place its receiver says stays (`destination_stays`) is advertised in the grant, and a later
/// `direct` frame for it (no longer than the place) is written there without a grant
/// (rdma_link.hpp, "Cached places"). Until the receiver admits its peer, it refuses what only an
/// admitted peer may send, and a link that ends mid-frame says how far the frame got (`cut`).

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "byteps/transport/rdma/rdma_link.hpp"

namespace bps::transport {

template <class V>
class rdma_link_rx {
 public:
  explicit rdma_link_rx(rdma_link<V>& link) : l_(link) {}

  void on_receive(std::byte* slot, const verbs::work_completion& wc) {
    if (wc.opcode == verbs::wc_opcode::recv_with_imm) return on_write(wc.byte_len, wc.imm);
    const std::span<const std::byte> msg(slot, wc.byte_len);
    auto p = rdma_msg::get_prefix(msg);
    if (!p)
      return l_.fail(fmt::format("protocol error: a message of {} bytes from {} is not ours",
                                 msg.size(), l_.peer_));
    {
      std::lock_guard lock(l_.mu_);
      l_.credits_ += p->credits;
    }
    if (!admitted()) {
      // A peer that has not proved who it is (its hello is still to come) may send frames and
      // announces (its hello, checked below as TCP checks it), credits, and a grant that
      // answers our own announce. Nothing of ours can be advertised to it, so a direct frame or
      // a revoke is a stranger's, and so is a grant nobody asked for.
      const bool stray = p->k == rdma_msg::kind::direct || p->k == rdma_msg::kind::revoke ||
                         (p->k == rdma_msg::kind::grant && !l_.awaits_grant(p->seq));
      if (stray)
        return refuse(fmt::format("an RDMA {} message before its hello", rdma_msg::name(p->k)));
    }
    switch (p->k) {
      case rdma_msg::kind::frame:
        return on_frame(msg.subspan(rdma_msg::prefix_size));
      case rdma_msg::kind::announce:
        return on_announce(p->seq, msg.subspan(rdma_msg::prefix_size));
      case rdma_msg::kind::grant:
        if (auto g = rdma_msg::get_grant(msg)) return l_.on_grant(p->seq, *g);
        return l_.fail("protocol error: a short grant from " + l_.peer_);
      case rdma_msg::kind::credit:
        return;
      case rdma_msg::kind::direct:
        return on_direct(p->seq, msg.subspan(rdma_msg::prefix_size));
      case rdma_msg::kind::revoke:
        if (auto id = rdma_msg::get_revoke(msg)) return l_.on_revoke(*id);
        return l_.fail("protocol error: a short revoke from " + l_.peer_);
    }
  }

  /// `reason`, and when the link ends in the middle of a large frame, how far that frame got
  /// (as TCP says it: "... in the middle of a push frame (8192 of its 20000 payload bytes)").
  std::string cut(const std::string& reason) const {
    if (!active_) return reason;
    const std::uint64_t in = staged_ ? done_ + got_ : done_;
    return fmt::format("{} in the middle of a {} frame ({} of its {} payload bytes)", reason,
                       wire::msg_name(h_.type), in, h_.payload_bytes);
  }

 private:
  struct advert {
    std::span<std::byte> place;
    bool live = true;  // not revoked yet
  };

  // The header at the start of `body`, validated as TCP validates it; false after failing.
  bool read_header(std::span<const std::byte> body) {
    if (body.size() < wire::header_size)
      return l_.fail("protocol error: a short frame from " + l_.peer_), false;
    auto decoded = wire::decode(body.first<wire::header_size>(), l_.max_frame_);
    if (!decoded) return l_.fail("protocol error: " + decoded.reason), false;
    h_ = decoded.value;
    if (wire::is_transport_msg(h_.type) && !admitted()) {
      // As over TCP: no decorator's handshake (nor a transport frame's scratch buffer) for a
      // peer that has not said hello.
      refuse(fmt::format("a transport frame (type {:#x}) before its hello",
                         static_cast<unsigned>(h_.type)));
      return false;
    }
    return true;
  }

  // Closes the link for what the peer sent, logged at WARNING with its address (as TCP logs
  // every connection it drops).
  void refuse(const std::string& why) {
    l_.log_.warn("dropping connection from {}: {}", l_.peer_, why);
    l_.fail("protocol error: " + why);
  }

  // The receiver's peer_admitted(), asked until it says yes (admission is never withdrawn).
  bool admitted() {
    if (!admitted_) admitted_ = l_.caps_.peer_admitted();
    return admitted_;
  }

  // Where the payload of h_ goes: the receiver's answer, or a scratch buffer for a transport
  // frame nobody here handles. Empty with `ok` false after failing the link.
  std::span<std::byte> destination(bool& ok) {
    ok = true;
    if (wire::is_transport_msg(h_.type) && !l_.caps_.transport_frames) {
      skipped_.resize(h_.payload_bytes);
      deliver_ = false;
      return skipped_;
    }
    deliver_ = true;
    std::string reason;
    std::span<std::byte> dest;
    try {
      dest = l_.receiver_->payload_destination(h_, reason);
    } catch (const std::exception& e) {
      reason = e.what();
      dest = {};
    }
    if (dest.size() != h_.payload_bytes) {
      if (reason.empty()) reason = "no place for the payload";
      l_.log_.warn("dropping connection from {}: {} frame refused: {}", l_.peer_,
                   wire::msg_name(h_.type), reason);
      l_.fail("protocol error: " + reason);
      ok = false;
    }
    return dest;
  }

  void on_frame(std::span<const std::byte> body) {
    if (!read_header(body)) return;
    if (body.size() - wire::header_size != h_.payload_bytes)
      return l_.fail(
          fmt::format("protocol error: {} sent a frame of {} payload bytes that "
                      "claims {}",
                      l_.peer_, body.size() - wire::header_size, h_.payload_bytes));
    bool ok = false;
    auto dest = destination(ok);
    if (!ok) return;
    if (!dest.empty()) std::memcpy(dest.data(), body.data() + wire::header_size, dest.size());
    deliver(dest);
  }

  void on_announce(std::uint64_t seq, std::span<const std::byte> body) {
    if (active_) return l_.fail("protocol error: " + l_.peer_ + " announced a frame mid-payload");
    if (!read_header(body)) return;
    bool ok = false;
    dest_ = destination(ok);
    if (!ok) return;
    step_ = 0;
    if (deliver_) {
      try {
        step_ = l_.caps_.progress_step(h_);
      } catch (const std::exception& e) {
        return l_.fail(std::string("protocol error: ") + e.what());
      }
    }
    active_ = true;
    seq_ = seq;
    done_ = reported_ = 0;
    moving_ = false;
    auto keys = l_.registry_.lookup(dest_.data(), dest_.size());
    staged_ = !keys;
    const auto id = rdma_msg::place_id::of(h_);
    const bool stays = !staged_ && deliver_ && destination_stays();
    if (auto old = advertised_.find(id); old != advertised_.end() && !stays)
      revoke(old->second, id);
    if (!staged_) {  // straight into the receiver's memory, in pieces of the step if it asked
      const std::uint64_t piece =
          step_ ? std::min<std::uint64_t>(step_, dest_.size()) : dest_.size();
      window_ = dest_.size();
      ++l_.tally_.granted_in_place;
      if (stays) {
        advertised_.insert_or_assign(id, advert{dest_, true});
        ++l_.tally_.advertised;
      }
      return grant({0, reinterpret_cast<std::uint64_t>(dest_.data()), keys->rkey,
                    stays ? rdma_msg::grant_stays : 0u, dest_.size(),
                    std::min<std::uint64_t>(piece, max_piece)});
    }
    next_window();
  }

  // A frame written at once into the place advertised for it. Its bytes land there whatever
  // the receiver answers now; if it names another destination, they are copied over on arrival
  // and the place is revoked. A revoked place is still accepted: the sender may have sent more
  // before the revoke reached it (the place is reserved for these frames, so nothing is lost).
  void on_direct(std::uint64_t seq, std::span<const std::byte> body) {
    if (active_) return l_.fail("protocol error: " + l_.peer_ + " sent a frame mid-payload");
    if (!read_header(body)) return;
    const auto id = rdma_msg::place_id::of(h_);
    auto it = advertised_.find(id);
    // The place fits any frame up to the size it was advertised with (a compressed push's
    // size varies from round to round); the frame takes its first bytes.
    if (it == advertised_.end() || it->second.place.size() < h_.payload_bytes)
      return l_.fail(
          fmt::format("protocol error: {} wrote a frame of {} bytes to a place this "
                      "end did not advertise",
                      l_.peer_, h_.payload_bytes));
    place_ = it->second.place.first(h_.payload_bytes);
    bool ok = false;
    dest_ = destination(ok);
    if (!ok) return;
    step_ = 0;
    if (deliver_) {  // cut-through: the sender writes in pieces of the step the grant named
      try {
        step_ = l_.caps_.progress_step(h_);
      } catch (const std::exception& e) {
        return l_.fail(std::string("protocol error: ") + e.what());
      }
    }
    active_ = true;
    seq_ = seq;
    done_ = reported_ = got_ = 0;
    staged_ = false;
    window_ = dest_.size();
    moving_ = dest_.data() != place_.data();
    if (moving_) ++l_.tally_.moved;
    if (moving_ || !deliver_ || !destination_stays()) revoke(it->second, id);
  }

  void next_window() {
    window_ = std::min<std::uint64_t>(l_.staging_, dest_.size() - done_);
    got_ = 0;
    ++l_.tally_.granted_staged;
    grant({done_, reinterpret_cast<std::uint64_t>(l_.rx_staging()), l_.v_.rkey(l_.mr_), 0u, window_,
           window_});
  }

  bool destination_stays() {
    try {
      return l_.caps_.destination_stays(h_, dest_);
    } catch (const std::exception&) {
      return false;  // a receiver that cannot say is asked every time
    }
  }

  void revoke(advert& a, const rdma_msg::place_id& id) {
    if (!a.live) return;
    a.live = false;
    std::unique_lock lock(l_.mu_);
    l_.revokes_out_.push_back(id);
    l_.pump_or_fail(lock);
  }

  void grant(const rdma_msg::grant& g) {
    got_ = 0;
    std::unique_lock lock(l_.mu_);
    l_.grants_out_.push_back({seq_, g});
    l_.pump_or_fail(lock);
  }

  void on_write(std::uint32_t bytes, std::uint32_t imm) {
    if (!active_ || imm != static_cast<std::uint32_t>(seq_) || got_ + bytes > window_)
      return l_.fail(
          fmt::format("protocol error: {} wrote {} bytes that no grant of this link "
                      "asked for",
                      l_.peer_, bytes));
    got_ += bytes;
    if (!staged_) {
      done_ += bytes;
    } else if (got_ == window_) {
      std::memcpy(dest_.data() + done_, l_.rx_staging(), window_);
      done_ += window_;
    } else {
      return;  // the rest of this window is still coming
    }
    if (done_ == dest_.size()) {
      active_ = false;
      if (moving_) std::memmove(dest_.data(), place_.data(), dest_.size());  // the place moved
      moving_ = false;
      return deliver(dest_);
    }
    if (step_ && deliver_ && done_ - reported_ >= step_) {
      reported_ = done_;
      try {
        l_.caps_.streaming->on_progress(h_, done_);
      } catch (const std::exception& e) {
        return l_.fail(std::string("protocol error: ") + e.what());
      }
    }
    if (staged_) next_window();
  }

  void deliver(std::span<std::byte> payload) {
    if (!deliver_) return;
    try {
      l_.receiver_->on_message(h_, payload);
    } catch (const std::exception& e) {
      l_.log_.warn("dropping connection from {}: handling a {} frame failed: {}", l_.peer_,
                   wire::msg_name(h_.type), e.what());
      l_.fail(std::string("protocol error: ") + e.what());
    }
  }

  static constexpr std::uint64_t max_piece = 1u << 30;  // one WRITE moves at most 1 GiB

  rdma_link<V>& l_;
  wire::header h_{};
  bool deliver_ = true;
  bool admitted_ = false;  // the receiver said its peer is admitted
  std::vector<std::byte> skipped_;
  // The large frame being received.
  bool active_ = false;
  bool staged_ = false;
  std::uint64_t seq_ = 0;
  std::span<std::byte> dest_;
  std::span<std::byte> place_;  // a direct frame's advertised place
  bool moving_ = false;         // ... which is not where the receiver wants it now
  std::size_t step_ = 0;
  std::uint64_t window_ = 0, got_ = 0, done_ = 0, reported_ = 0;
  std::map<rdma_msg::place_id, advert> advertised_;  // places the sender may use, never forgotten
};

}  // namespace bps::transport
