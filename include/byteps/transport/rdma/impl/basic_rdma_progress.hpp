#pragma once
/// @file
/// `basic_rdma<V>`'s progress thread: tasks, connection-manager events and completions, and how
/// it sleeps (basic_rdma.hpp); `stop()`.

#include "byteps/transport/rdma/basic_rdma.hpp"

namespace bps::transport {

template <RdmaVerbs V>
void basic_rdma<V>::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (exit_) return;  // after stop() nothing runs any more
    tasks_.push_back(std::move(task));
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_, &one, sizeof one);
}

template <RdmaVerbs V>
bool basic_rdma<V>::poll_links() {
  bool any = false;
  for (auto it = links_.begin(); it != links_.end();) {
    auto& l = it->second;
    try {
      if (l->polling()) any = l->poll() || any;
    } catch (const std::exception& e) {  // an emulation's violation, or a verbs call failing
      l->fail(fmt::format("connection to {} failed: {}", l->peer(), e.what()));
    }
    if (l->drained()) {
      l->release();
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
  return any;
}

template <RdmaVerbs V>
void basic_rdma<V>::run() {
  int idle = 0;
  while (true) {
    std::deque<std::function<void()>> tasks;
    {
      std::lock_guard lock(mu_);
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) {
      try {
        t();
      } catch (const std::exception& e) {
        log_.error("rdma: a transport task failed: {}", e.what());
      }
    }
    if (exit_) {
      std::lock_guard lock(mu_);
      if (tasks_.empty()) return;
      continue;
    }
    bool busy = !tasks.empty();
    while (auto e = v_.get_cm_event(ch_)) {
      busy = true;
      try {
        handle_event(*e);
      } catch (const std::exception& ex) {
        log_.error("rdma: handling {} failed: {}", verbs::event_name(e->type), ex.what());
      }
    }
    busy = poll_links() || busy;
    if (busy || opts_.busy_poll) {
      idle = 0;
      continue;
    }
    if (++idle < opts_.poll_rounds) continue;
    // Sleep: arm every queue, then look once more (a completion may have come before the arm).
    for (auto& [id, l] : links_)
      if (l->polling() && l->cq()) v_.req_notify_cq(l->cq());
    if (poll_links()) continue;
    while (v_.get_cq_event(cc_)) {
    }
    pollfd fds[3] = {{v_.fd(cc_), POLLIN, 0}, {v_.fd(ch_), POLLIN, 0}, {wake_, POLLIN, 0}};
    ::poll(fds, 3, 1000);  // bounded: the loop looks at exit_ at least once a second
    if (fds[2].revents & POLLIN) {
      std::uint64_t v = 0;
      [[maybe_unused]] auto n = ::read(wake_, &v, sizeof v);
    }
    while (v_.get_cq_event(cc_)) {
    }
    idle = 0;
  }
}

template <RdmaVerbs V>
void basic_rdma<V>::stop_links() {
  for (auto& [id, l] : links_) l->fail("transport stopped");
  for (auto& [id, l] : accepting_) l->fail("transport stopped");
  std::vector<typename V::cm_id*> ids;
  for (auto& [id, a] : attempts_) ids.push_back(id);
  for (auto* id : ids) end_attempt(id, "transport stopped");
}

template <RdmaVerbs V>
void basic_rdma<V>::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  post([this] { stop_links(); });
  {
    std::lock_guard lock(mu_);
    exit_ = true;  // the thread ends once the tasks so far ran
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_, &one, sizeof one);
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // stopped from one of our own callbacks: the loop ends by itself
    return;
  }
  if (thread_.joinable()) thread_.join();
  // Whatever is left, in verbs' order: queue pairs and ids, queues, regions, channels, device.
  for (auto& [id, l] : links_) l->release();
  for (auto& [id, l] : accepting_) l->release();
  links_.clear();
  accepting_.clear();
  for (auto& [id, f] : listeners_) v_.destroy_id(id);
  listeners_.clear();
  registry_->clear();
  v_.destroy_comp_channel(cc_);
  v_.destroy_event_channel(ch_);
  v_.close_device(dev_);
  ::close(wake_);
}

}  // namespace bps::transport
