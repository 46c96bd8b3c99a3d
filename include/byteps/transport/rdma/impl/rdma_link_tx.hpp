#pragma once
/// @file
/// `rdma_link<V>`'s sending side and its completion handling (rdma_link.hpp says how a frame
/// travels, and why credits and the reserved last credit).

#include <algorithm>
#include <cstring>

#include "byteps/transport/rdma/rdma_link.hpp"

namespace bps::transport {

template <class V>
void rdma_link<V>::pump() {
  // Revokes, then grants: the peer's frame waits on them, and they are small. A revoke goes
  // before a grant queued after it, so the peer forgets a place before it may send again.
  while (!revokes_out_.empty() && can_post(1)) {
    std::byte whole[rdma_msg::revoke_size];
    rdma_msg::put_revoke(whole, revokes_out_.front());
    post_message(rdma_msg::kind::revoke, 0, std::span(whole).subspan(rdma_msg::prefix_size), {},
                 {});
    revokes_out_.pop_front();
  }
  while (!grants_out_.empty() && can_post(1)) {
    std::byte body[rdma_msg::grant_size - rdma_msg::prefix_size];
    std::byte whole[rdma_msg::grant_size];
    rdma_msg::put_grant(whole, grants_out_.front().second);
    std::memcpy(body, whole + rdma_msg::prefix_size, sizeof body);
    post_message(rdma_msg::kind::grant, grants_out_.front().first, body, {}, {});
    grants_out_.pop_front();
  }
  while (!queue_.empty()) {
    auto& f = queue_.front();
    if (!f.announced) {
      if (!can_post(1)) break;
      const auto hb = wire::encode(f.h);
      if (f.payload.size() <= inline_limit()) {
        post_message(rdma_msg::kind::frame, f.seq, hb, f.payload, std::move(f.on_sent));
        queue_.pop_front();
        continue;
      }
      auto place = places_.find(rdma_msg::place_id::of(f.h));
      if (place != places_.end() && place->second.length >= f.payload.size()) {
        // The receiver's advertised place, big enough: the header, then at once the payload
        // into its first bytes, no grant. A larger frame (a compressed push that grew) asks.
        // Counted before the post: the receiver may act on the message (and a reader see
        // its effect) before this thread runs again.
        ++tally_.cached;
        post_message(rdma_msg::kind::direct, f.seq, hb, {}, {});
        auto g = place->second;
        g.length = f.payload.size();
        f.grants.push_back(g);
      } else {
        ++tally_.announced;
        post_message(rdma_msg::kind::announce, f.seq, hb, {}, {});
      }
      f.announced = true;
    }
    bool blocked = false;
    while (!f.grants.empty() && !blocked) {
      const auto& g = f.grants.front();
      while (f.grant_posted < g.length) {
        if (!can_post(1)) {
          blocked = true;
          break;
        }
        std::uint64_t piece = std::min(g.piece, g.length - f.grant_posted);
        const std::byte* src = f.payload.data() + g.offset + f.grant_posted;
        std::uint32_t lkey = 0;
        bool staged = false;
        if (auto keys = registry_.lookup(src, piece)) {
          lkey = keys->lkey;
          ++tally_.writes_from_payload;
        } else {
          if (tx_staging_busy_) {  // the staging area holds a write still in flight
            blocked = true;
            break;
          }
          piece = std::min<std::uint64_t>(piece, staging_);
          std::memcpy(tx_staging(), src, piece);
          src = tx_staging();
          lkey = v_.lkey(mr_);
          staged = tx_staging_busy_ = true;
          ++tally_.writes_staged;
        }
        v_.post_send(id_, {tag_write,
                           verbs::send_opcode::write_with_imm,
                           {const_cast<std::byte*>(src), static_cast<std::uint32_t>(piece), lkey},
                           g.addr + f.grant_posted,
                           g.rkey,
                           static_cast<std::uint32_t>(f.seq)});
        --credits_;
        ++sq_used_;
        ++f.writes_posted;
        f.grant_posted += piece;
        writes_.push_back({piece, staged});
      }
      if (!blocked) {
        f.grants.pop_front();
        f.grant_posted = 0;
      }
    }
    break;  // the front frame waits for its writes' completions (and perhaps more grants)
  }
  // Credits nobody carried: alone, on the reserved last credit if need be.
  if (owed_ >= std::max<std::uint32_t>(2, rx_depth_ / 2) && can_post(0))
    post_message(rdma_msg::kind::credit, 0, {}, {}, {});
}

template <class V>
void rdma_link<V>::on_grant(std::uint64_t seq, const rdma_msg::grant& g) {
  std::unique_lock lock(mu_);
  if (closed_) return;
  if (queue_.empty() || queue_.front().seq != seq || !queue_.front().announced ||
      g.offset + g.length > queue_.front().payload.size() || g.piece == 0 || g.length == 0) {
    lock.unlock();
    return fail(
        fmt::format("protocol error: {} granted frame {} a target that no announced "
                    "frame of this link has",
                    peer_, seq));
  }
  auto& f = queue_.front();
  if ((g.flags & rdma_msg::grant_stays) != 0 && g.offset == 0 && g.length == f.payload.size())
    places_.insert_or_assign(rdma_msg::place_id::of(f.h), g);  // later rounds write there at once
  f.grants.push_back(g);
  pump_or_fail(lock);
}

template <class V>
void rdma_link<V>::on_send_done(std::uint64_t wr_id, bool ok) {
  sent_callback done;
  {
    std::unique_lock lock(mu_);
    --sq_used_;
    if ((wr_id & ~0xffffffffull) == tag_send) {
      const auto slot = static_cast<std::uint32_t>(wr_id & 0xffffffffu);
      auto it = slot_callbacks_.find(slot);
      if (it != slot_callbacks_.end()) {
        done = std::move(it->second);
        slot_callbacks_.erase(it);
      }
      free_slots_.push_back(slot);
    } else if (!writes_.empty() && !queue_.empty()) {
      const auto w = writes_.front();
      writes_.pop_front();
      if (w.staged) tx_staging_busy_ = false;
      auto& f = queue_.front();
      --f.writes_posted;
      if (ok) f.written += w.length;
      if ((f.written == f.payload.size() || closed_) && f.writes_posted == 0) {
        done = std::move(f.on_sent);
        queue_.pop_front();
      }
    }
    if (!closed_) pump_or_fail(lock);
  }
  if (done) done();
}

template <class V>
void rdma_link<V>::fail(const std::string& reason) {
  if (failed_) return;
  failed_ = true;
  close_reason_ = reason;
  std::vector<sent_callback> dropped;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    grants_out_.clear();
    revokes_out_.clear();
    // A frame with writes still posted keeps its on_sent for their (flushed) completion: the
    // NIC may read its payload until then.
    std::deque<outgoing> kept;
    for (auto& f : queue_) {
      if (f.writes_posted > 0)
        kept.push_back(std::move(f));
      else if (f.on_sent)
        dropped.push_back(std::move(f.on_sent));
    }
    queue_.swap(kept);
  }
  if (id_) {
    try {
      v_.disconnect(id_);  // the queue pair goes to the error state: what is posted flushes
    } catch (const std::exception& e) {
      log_.warn("rdma: disconnecting {} failed: {}", peer_, e.what());
    }
  }
  // A frame cut in the middle says how far it got, as over TCP; the peer is named.
  const std::string why = rx_ ? rx_->cut(reason) : reason;
  if (why != reason && reason != "closed locally")
    log_.warn("link to {} closed: {}", peer_, why);
  else
    log_.debug("rdma: link to {} closed: {}", peer_, why);
  close_reason_ = why;
  for (auto& cb : dropped) cb();
  caps_ = {};
  if (auto rx = std::move(receiver_)) rx->on_close(why);
}

template <class V>
void rdma_link<V>::on_start(std::shared_ptr<receiver> r) {
  started_ = true;
  if (failed_) return r->on_close(close_reason_);
  receiver_ = std::move(r);
  caps_ = receiver_->capabilities();
  rx_ = std::make_unique<rdma_link_rx<V>>(*this);
}

template <class V>
bool rdma_link<V>::poll() {
  verbs::work_completion wcs[32];
  const int n = v_.poll_cq(cq_, wcs);
  for (int i = 0; i < n; ++i) {
    const auto& wc = wcs[i];
    const bool ok = wc.status == verbs::wc_status::success;
    if (!ok && !failed_)
      fail(fmt::format("connection to {} failed: {}", peer_, verbs::status_name(wc.status)));
    if ((wc.wr_id & ~0xffffffffull) != tag_recv) {
      on_send_done(wc.wr_id, ok);
      continue;
    }
    --posted_recvs_;
    if (failed_) continue;
    const auto slot = static_cast<std::uint32_t>(wc.wr_id & 0xffffffffu);
    rx_->on_receive(recv_slot(slot), wc);
    if (failed_) continue;
    try {
      post_receive(slot);  // only now: the slot's message has been read
    } catch (const std::exception& e) {
      fail(fmt::format("re-posting a receive for {} failed: {}", peer_, e.what()));
      continue;
    }
    std::unique_lock lock(mu_);
    ++owed_;
    pump_or_fail(lock);
  }
  return n > 0;
}

}  // namespace bps::transport
