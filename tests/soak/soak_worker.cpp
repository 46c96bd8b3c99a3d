// The soak worker (scripts/soak.sh runs it): many tensors for many rounds, every result checked
// against the exact sum, resident memory printed as it goes.
#include <byteps/byteps.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  long value = 0;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> value;
      return value;
    }
    status.ignore(1 << 10, '\n');
  }
  return -1;
}

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return std::atoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int tensors = arg(argc, argv, "--tensors", 200);
  const int rounds = arg(argc, argv, "--rounds", 5000);
  const int report = arg(argc, argv, "--report-every", 500);
  try {
    using Comm = bps::Communicator<bps::transport::tcp, bps::local::none,
                                   bps::partition::by_bytes, bps::schedule::priority>;
    Comm comm(bps::Config::from_env());
    const int rank = comm.rank(), n = comm.size();
    std::vector<std::vector<std::int32_t>> data(static_cast<std::size_t>(tensors));
    for (int t = 0; t < tensors; ++t)
      data[static_cast<std::size_t>(t)].resize(static_cast<std::size_t>(1 + (t * 2654435761u) % 4096));
    std::vector<bps::handle> handles(data.size());
    for (int r = 0; r < rounds; ++r) {
      for (std::size_t t = 0; t < data.size(); ++t) {
        for (std::size_t i = 0; i < data[t].size(); ++i)
          data[t][i] = static_cast<std::int32_t>(i + t + static_cast<std::size_t>(r) + rank * 7);
        handles[t] = comm.push_pull("t" + std::to_string(t), std::span(data[t]),
                                    {.priority = static_cast<int>(t % 7)});
      }
      for (std::size_t t = 0; t < data.size(); ++t) {
        handles[t].wait();
        for (std::size_t i = 0; i < data[t].size(); ++i) {
          const auto want = static_cast<std::int32_t>(
              n * static_cast<std::int64_t>(i + t + static_cast<std::size_t>(r)) + 7 * (n * (n - 1) / 2));
          if (data[t][i] != want) {
            std::fprintf(stderr, "soak: round %d tensor %zu element %zu is %d, expected %d\n", r, t,
                         i, data[t][i], want);
            return 1;
          }
        }
      }
      if (rank == 0 && (r + 1) % report == 0) {
        std::printf("round %d: rss %ld KiB\n", r + 1, resident_kib());
        std::fflush(stdout);
      }
    }
    comm.barrier();
    return 0;
  } catch (const bps::error& e) {
    std::fprintf(stderr, "soak: %s\n", e.what());
    return 1;
  }
}
