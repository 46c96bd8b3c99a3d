#pragma once
// The tests' accessor to a Server's internals (the friend that server.hpp declares): crashing a
// server in process, which no program needs, stays out of the public header.
#include <byteps/server/server.hpp>

namespace bps::testing {

struct server_access {
  /// Dies as a crashed process does: every connection closes at once with no bye, and `run()`
  /// throws `communicator_error`. Any thread.
  template <class T>
  static void crash(Server<T>& server) {
    server.finishing_ = true;  // no error replies: the workers must see only the connections drop
    server.shutdown();
    server.control_.abandon("aborted for a test (a simulated crash)");
  }
};

}  // namespace bps::testing
