// A worker for the fault matrix (fault_matrix.sh): joins, prints "ready", then either
// push_pulls in a loop ("busy", printing "round N" after each) or sits idle, checking the
// communicator between naps ("idle"). It exits 1 as soon as the cluster fails, printing the
// communicator's message after what it was doing ("joining", "push_pull round N" or "idle"), so
// the matrix can check that a fault struck in the phase it was meant for; it exits 0 only if
// told to stop by SIGTERM (which the matrix never sends to a healthy cluster it expects to fail).
#include <byteps/byteps.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const bool busy = argc > 1 && std::strcmp(argv[1], "busy") == 0;
  std::string doing = "joining";
  try {
    using Comm = bps::Communicator<bps::transport::tcp, bps::local::none,
                                   bps::partition::by_bytes, bps::schedule::priority>;
    Comm comm(bps::Config::from_env());
    std::printf("ready\n");
    std::fflush(stdout);
    std::vector<float> v(1 << 18, 1.0f);
    for (long round = 0;; ++round) {
      if (busy) {
        doing = "push_pull round " + std::to_string(round);
        comm.push_pull("loop", std::span(v)).wait();
        std::printf("round %ld\n", round);
        std::fflush(stdout);
      } else {
        doing = "idle";
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        comm.throw_if_failed();
      }
    }
  } catch (const bps::error& e) {
    std::fprintf(stderr, "fault_worker: %s: %s\n", doing.c_str(), e.what());
    return 1;
  }
}
