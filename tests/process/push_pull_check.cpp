// Run as every worker of a real cluster (byteps-launch): push_pulls every dtype at sizes from
// one element to several partitions for 20 rounds (--rounds), and exits 1 at the first element
// that is not the exact reference sum. With BYTEPS_LOCAL_SIZE > 1 (or --local-stage host) the
// processes of a machine meet in shared memory first (bps::local::host).
//
//   push_pull_check [--rounds N] [--max-elements N] [--local-stage auto|host|none]
//                   [--kill-rank G | --kill-machine M] [--kill-at-round R]
//
// --rounds: the sanitizer suites run 5, where every instrumented byte costs 5-20 times more;
// each round's values differ, so several rounds still check that no state leaks between them.
// --max-elements: leaves out the sizes above N; the sanitizer suites stop at 100003 elements,
// still several partitions at the tests' BYTEPS_PARTITION_BYTES=65536.
// --kill-rank/--kill-at-round: worker G sends itself SIGKILL at the start of round R (the
// shared-memory cleanup test); --kill-machine: every local rank of machine M does. Every worker prints "job <id>" so scripts can find its segments.
// Built with BYTEPS_CHECK_TLS=1 (tests/tls) it runs over transport::tls<tcp> instead of tcp.
#include <byteps/byteps.hpp>
#if BYTEPS_CHECK_TLS
#include <byteps/bodies.hpp>  // compiled mode: the communicators over tls are instantiated here
#include <byteps/transport/tls/tls.hpp>
#endif

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "../cluster/exact_rounds.hpp"
#include "../cluster/values.hpp"

namespace {

struct Args {
  std::string local_stage = "auto";
  int rounds = 20;
  std::size_t max_elements = SIZE_MAX;
  int kill_rank = -1;
  int kill_machine = -1;
  int kill_at_round = -1;
};

template <class Comm>
int check(const bps::Config& cfg, const Args& args) {
  Comm comm(cfg);
  const int workers = comm.size(), rank = comm.rank();
  std::printf("worker %d of %d: job %016llx\n", rank, workers,
              static_cast<unsigned long long>(comm.job_id()));
  std::fflush(stdout);
  std::vector<std::size_t> sizes;
  for (std::size_t n : {1, 7, 4097, 100003, 1100007})
    if (n <= args.max_elements) sizes.push_back(n);
  std::size_t checked = 0;
  for (int round = 0; round < args.rounds; ++round) {
    if ((rank == args.kill_rank || comm.machine() == args.kill_machine) &&
        round == args.kill_at_round)
      std::raise(SIGKILL);
    std::vector<std::vector<std::byte>> buffers;
    std::vector<bps::handle> handles;
    for (bps::dtype t : bps::all_dtypes)
      for (std::size_t n : sizes) buffers.push_back(bps::test::fill(t, n, rank, round));
    bps::test::issue_then_wait_all(handles, [&] {  // every buffer outlives its handle
      std::size_t k = 0;
      for (bps::dtype t : bps::all_dtypes)
        for (std::size_t n : sizes)
          handles.push_back(comm.push_pull(fmt::format("{}x{}", bps::dtype_name(t), n),
                                           buffers[k++].data(), n, t,
                                           {.priority = static_cast<int>(n % 3)}));
    });
    std::size_t k = 0;
    for (bps::dtype t : bps::all_dtypes)
      for (std::size_t n : sizes) {
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
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--local-stage") {
      args.local_stage = argv[++i];
    } else if (i + 1 < argc && a == "--rounds" && std::atoi(argv[i + 1]) >= 1) {
      args.rounds = std::atoi(argv[++i]);
    } else if (i + 1 < argc && a == "--max-elements" && std::atoll(argv[i + 1]) >= 1) {
      args.max_elements = static_cast<std::size_t>(std::atoll(argv[++i]));
    } else if (i + 1 < argc && a == "--kill-rank") {
      args.kill_rank = std::atoi(argv[++i]);
    } else if (i + 1 < argc && a == "--kill-machine") {
      args.kill_machine = std::atoi(argv[++i]);
    } else if (i + 1 < argc && a == "--kill-at-round") {
      args.kill_at_round = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: push_pull_check [--rounds N>=1] [--max-elements N>=1] "
                   "[--local-stage auto|host|none] "
                   "[--kill-rank G | --kill-machine M] [--kill-at-round R]\n");
      return 2;
    }
  }
  try {
#if BYTEPS_CHECK_TLS
    using net = bps::transport::ipc<bps::transport::tls<bps::transport::tcp>>;
#else
    using net = bps::transport::ipc<bps::transport::tcp>;
#endif
    using Direct =
        bps::Communicator<net, bps::local::none, bps::partition::by_bytes, bps::schedule::priority>;
    using Host =
        bps::Communicator<net, bps::local::host, bps::partition::by_bytes, bps::schedule::priority>;
    const auto cfg = bps::Config::from_env();
    const bool host =
        args.local_stage == "host" || (args.local_stage == "auto" && cfg.local_size > 1);
    return host ? check<Host>(cfg, args) : check<Direct>(cfg, args);
  } catch (const bps::error& e) {
    std::fprintf(stderr, "push_pull_check: %s\n", e.what());
    return 1;
  }
}
