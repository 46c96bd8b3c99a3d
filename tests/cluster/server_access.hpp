#pragma once
// The tests' accessor to a Server's internals (the friend that server.hpp declares): crashing a
// server in process and capturing its log, which no program needs, stay out of the public header.
#include <byteps/server/impl/server.hpp>

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

  /// The server's logger, to capture its lines with `logger::set_sink`. Any thread.
  template <class T, class H>
  static logger& log(Server<T, H>& server) {
    return server.node_->log_;
  }
};

}  // namespace bps::testing
