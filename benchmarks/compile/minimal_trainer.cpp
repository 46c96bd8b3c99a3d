// The minimal trainer of docs/performance.md, "Compile time": one include, one communicator
// over TCP, one push_pull. benchmarks/compile-time.sh compiles it header-only and in compiled
// mode (BYTEPS_COMPILED, as byteps::compiled sets it) to time what a trainer pays for byteps.
#include <byteps/byteps.hpp>

#include <span>
#include <vector>

int main() {
  bps::Communicator<bps::transport::tcp, bps::local::none, bps::partition::by_bytes,
                    bps::schedule::priority>
      comm(bps::Config::from_env());
  std::vector<float> grad(1024, 1.0f);
  comm.push_pull("grad", std::span(grad)).wait();
}
