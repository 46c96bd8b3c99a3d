#pragma once
// The tests' accessor to a Server's internals (the friend that server.hpp declares): crashing a
// server in process and capturing its log, which no program needs, stay out of the public header.
#include <byteps/server/impl/server.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

namespace bps::testing {

struct server_access {
  /// Dies as a crashed process does: every connection closes at once with no bye, and `run()`
  /// throws `communicator_error`. Any thread.
  template <class T, class H>
  static void crash(Server<T, H>& server) {
    auto& s = *server.node_;
    s.finishing_ = true;  // no error replies: the workers must see only the connections drop
    s.shutdown();
    s.control_.abandon("aborted for a test (a simulated crash)");
  }

  /// Elastic training: waits until the server applied membership epoch `epoch` on every engine
  /// thread (its rounds in flight started over); false when `timeout` passed first. Any thread.
  /// The node queues each engine's restart before the epoch can be read, so the probe posted
  /// after reading it runs after the restart.
  template <class T, class H>
  static bool applied_membership(Server<T, H>& server, std::uint64_t epoch,
                                 std::chrono::milliseconds timeout) {
    auto& s = *server.node_;
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard lock(s.mu_);
        if (s.epoch_ >= epoch) break;
      }
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (auto& e : s.engines_) {  // an engine runs its tasks in order: the restart ran first
      auto ran = std::make_shared<std::promise<void>>();
      auto done = ran->get_future();
      e->post([ran] { ran->set_value(); });
      if (done.wait_until(until) != std::future_status::ready) return false;
    }
    return true;
  }

  /// The server's logger, to capture its lines with `logger::set_sink`. Any thread.
  template <class T, class H>
  static logger& log(Server<T, H>& server) {
    return server.node_->log_;
  }
};

}  // namespace bps::testing
