// Run as every worker of a real cluster (byteps-launch): push_pulls every dtype at sizes from
// one element to several partitions for 20 rounds, and exits 1 at the first element that is not
// the exact reference sum.
#include <byteps/byteps.hpp>

#include <cstdio>

#include "../cluster/values.hpp"

int main() {
  try {
    using Comm = bps::Communicator<bps::transport::tcp, bps::local::none,
                                   bps::partition::by_bytes, bps::schedule::priority>;
    Comm comm(bps::Config::from_env());
    const int workers = comm.size(), rank = comm.rank();
    const std::size_t sizes[] = {1, 7, 4097, 100003, 1100007};
    std::size_t checked = 0;
    for (int round = 0; round < 20; ++round) {
      std::vector<std::vector<std::byte>> buffers;
      std::vector<bps::handle> handles;
      for (bps::dtype t : bps::all_dtypes)
        for (std::size_t n : sizes) {
          buffers.push_back(bps::test::fill(t, n, rank, round));
          handles.push_back(comm.push_pull(fmt::format("{}x{}", bps::dtype_name(t), n),
                                           buffers.back().data(), n, t,
                                           {.priority = static_cast<int>(n % 3)}));
        }
      std::size_t k = 0;
      for (bps::dtype t : bps::all_dtypes)
        for (std::size_t n : sizes) {
          handles[k].wait();
          auto wrong = bps::test::first_wrong(t, buffers[k], n, workers, round);
          if (wrong != n) {
            std::fprintf(stderr, "worker %d: %s x %zu round %d: element %zu is not the sum\n", rank,
                         std::string(bps::dtype_name(t)).c_str(), n, round, wrong);
            return 1;
          }
          checked += n;
          ++k;
        }
    }
    comm.barrier();
    std::printf("worker %d of %d: %zu elements equal the reference sums\n", rank, workers, checked);
    return 0;
  } catch (const bps::error& e) {
    std::fprintf(stderr, "push_pull_check: %s\n", e.what());
    return 1;
  }
}
