// A worker for the fault matrix (fault_matrix.sh): joins, prints "ready", then either
// push_pulls in a loop ("busy") or sits idle, checking the communicator between naps ("idle").
// It exits 1 with the communicator's message as soon as the cluster fails, and 0 only if told
// to stop by SIGTERM (which the matrix never sends to a healthy cluster it expects to fail).
#include <byteps/byteps.hpp>

#include <cstdio>
#include <cstring>
#include <thread>

int main(int argc, char** argv) {
  const bool busy = argc > 1 && std::strcmp(argv[1], "busy") == 0;
  try {
    using Comm = bps::Communicator<bps::transport::tcp, bps::local::none,
                                   bps::partition::by_bytes, bps::schedule::priority>;
    Comm comm(bps::Config::from_env());
    std::printf("ready\n");
    std::fflush(stdout);
    std::vector<float> v(1 << 18, 1.0f);
    for (;;) {
      if (busy) {
        comm.push_pull("loop", std::span(v)).wait();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        comm.throw_if_failed();
      }
    }
  } catch (const bps::error& e) {
    std::fprintf(stderr, "fault_worker: %s\n", e.what());
    return 1;
  }
}
