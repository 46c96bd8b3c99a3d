#pragma once
/// @file
/// The bodies of rendezvous/gate.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::rendezvous {

std::shared_ptr<pending_hello> hello_gate::admit(const std::string& peer,
                                                 std::function<void()> close,
                                                 std::function<bool()> heard_from) {
  auto t = std::make_shared<pending_hello>(peer, fresh_nonce());
  std::lock_guard evicting(evicting_);  // one admit at a time: the choice below stays valid
  std::vector<waiting> full;            // when the limit is full: who waits, oldest first
  {
    std::lock_guard lock(mu_);
    if (stopped_) return nullptr;
    if (pending_ >= max_pending_) full = waiting_locked();
  }
  // Asked without the lock: asking may drop the last reference to a link.
  std::shared_ptr<pending_hello> victim;
  for (const auto& w : full) {
    if (!w.heard_from || !w.heard_from()) {
      victim = w.ticket.lock();
      break;
    }
  }
  full.clear();
  waiting oldest;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return nullptr;
    if (pending_ >= max_pending_) oldest = evict_locked(victim.get());
    ++pending_;
    queue_.push_back({t, close, heard_from, detail::timer_thread::clock::now(), {}});
  }
  if (oldest.close) {
    log_.warn(
        "closing the connection from {} after {} ms without a hello, to admit one from {}: "
        "{} connections have not said hello yet (BYTEPS_MAX_PENDING_CONNECTIONS={}), and a "
        "node of this job says hello at once; a flood or a port scan fills this limit",
        oldest.peer, waited_ms(oldest), peer, max_pending_, max_pending_);
    oldest.close();
  }
  if (!arm_timeout(t, std::move(close), std::move(heard_from))) {
    // stopping: nobody is admitted any more
    if (t->settle()) done(nullptr);
    return nullptr;
  }
  return t;
}

bool hello_gate::arm_timeout(const std::shared_ptr<pending_hello>& t, std::function<void()> close,
                             std::function<bool()> heard_from) {
  return timer_.post_at(
      detail::timer_thread::clock::now() + timeout_,
      [this, weak = std::weak_ptr<pending_hello>(t), close = std::move(close),
       heard_from = std::move(heard_from)](bool cancelled) mutable {
        auto ticket = weak.lock();
        if (cancelled || !ticket || ticket->settled()) return;
        if (heard_from && heard_from()) {
          if (!arm_timeout(ticket, std::move(close), std::move(heard_from)) && ticket->settle())
            done(nullptr);  // stopping
          return;
        }
        if (!ticket->settle()) return;
        done(&gate_counts::timed_out);
        log_.warn(
            "closing the connection from {}: no hello within {} ms "
            "(BYTEPS_HELLO_TIMEOUT_MS); a peer of this job says hello "
            "at once",
            ticket->peer(), timeout_.count());
        close();
      });
}

hello_gate::waiting hello_gate::evict_locked(const pending_hello* victim) {
  prune_locked();
  for (;;) {
    auto chosen = std::find_if(queue_.begin(), queue_.end(), [&](const waiting& w) {
      auto ticket = w.ticket.lock();
      return ticket && ticket.get() == victim;
    });
    if (chosen == queue_.end()) {
      victim = nullptr;
      chosen =
          std::find_if(queue_.begin(), queue_.end(), [](const waiting& w) { return !settled(w); });
    }
    if (chosen == queue_.end()) return {};
    waiting w = std::move(*chosen);
    queue_.erase(chosen);
    auto ticket = w.ticket.lock();
    if (!ticket || !ticket->settle()) continue;  // settled meanwhile: its own path counts it
    --pending_;
    ++counts_.evicted;
    w.peer = ticket->peer();
    return w;
  }
}

std::vector<hello_gate::waiting> hello_gate::waiting_locked() const {
  std::vector<waiting> out;
  for (const auto& w : queue_)
    if (!settled(w)) out.push_back(w);
  return out;
}

}  // namespace bps::rendezvous
