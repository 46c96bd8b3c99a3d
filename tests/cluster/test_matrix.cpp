// The same properties over every transport and every CPU local policy, from one list (as Gloo
// parametrises its tests): exact sums of every dtype at odd sizes (with whole answers, and in
// pieces from servers that sum as pushes arrive), averages, and broadcast.
// A new transport or local policy is one line of BPS_EVERY_SETUP.
#include <byteps/transport/faulty/faulty.hpp>
#include <catch2/catch.hpp>

#include "cluster.hpp"
#include "exact_rounds.hpp"
#include "faulty_instances.hpp"
#include "run_cluster.hpp"
#include "values.hpp"

using namespace bps;

namespace {

using matrix_ipc = transport::ipc<transport::tcp>;
using matrix_faulty = transport::faulty<transport::tcp>;  // no plan: every frame passes

// X(transport, local policy, name): each setup runs every property below. Machines: 2, with
// 2 + 1 worker processes under local::host (machines of different sizes), 1 each under none.
#define BPS_EVERY_SETUP(X)                                      \
  X(transport::tcp, local::none, "tcp - local none")            \
  X(transport::tcp, local::host, "tcp - local host")            \
  X(matrix_ipc, local::none, "ipc over tcp - local none")       \
  X(matrix_ipc, local::host, "ipc over tcp - local host")       \
  X(matrix_faulty, local::none, "faulty over tcp - local none") \
  X(matrix_faulty, local::host, "faulty over tcp - local host")

template <class L>
std::vector<int> matrix_machines() {
  if constexpr (L::is_identity)
    return {1, 1};
  else
    return {2, 1};
}

template <class Net, class L>
using matrix_comm = Communicator<Net, L, partition::by_bytes, schedule::priority>;

// `chunk`: the servers' cut-through chunk; 1 KiB answers an 8 KiB partition in up to 8 pieces.
Config matrix_config(std::size_t chunk = 0) {
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 8192;  // several partitions per tensor, on both servers
  cfg.server_chunk_bytes = chunk;
  return cfg;
}

template <class Net, class L>
void matrix_exact_sums(const char* setup, std::size_t chunk = 0) {
  using comm_t = matrix_comm<Net, L>;
  const auto local = matrix_machines<L>();
  const int processes = local[0] + local[1];
  const std::size_t sizes[] = {1, 3, 1023, 4097, 20011};
  test::run_cluster<Net, comm_t>(matrix_config(chunk), local, [&](comm_t& comm) {
    BPS_EXPECT(comm.size() == processes, "{}: size {}", setup, comm.size());
    for (int round = 0; round < 3; ++round)
      test::exact_round_every_dtype(comm, sizes, round, processes, std::string(setup) + ": ");
  });
}

template <class Net, class L>
void matrix_average_and_broadcast(const char* setup, std::size_t chunk = 0) {
  using comm_t = matrix_comm<Net, L>;
  const auto local = matrix_machines<L>();
  const int processes = local[0] + local[1];
  test::run_cluster<Net, comm_t>(matrix_config(chunk), local, [&](comm_t& comm) {
    const int rank = comm.rank();
    // Average: rank r pushes r + i; the mean over p processes is (p-1)/2 + i, exact in binary
    // for p = 2 and p = 3 here (halves and whole numbers).
    std::vector<double> v(5000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = rank + static_cast<double>(i);
    comm.push_pull("mean", std::span(v), {.average = true}).wait();
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double expect = (processes - 1) / 2.0 + static_cast<double>(i);
      BPS_EXPECT(v[i] == expect, "{}: rank {} mean[{}] = {}, expected {}", setup, rank, i, v[i],
                 expect);
    }
    // Broadcast from the last process: everyone ends with its data, -0.0 and NaN bits too.
    const int root = processes - 1;
    std::vector<float> b(3001, static_cast<float>(rank));
    if (rank == root) {
      b[0] = -0.0f;
      b[1] = std::numeric_limits<float>::quiet_NaN();
    }
    comm.broadcast("from last", std::span(b), root).wait();
    BPS_EXPECT(std::signbit(b[0]) && b[0] == 0.0f, "{}: rank {} b[0] = {}", setup, rank, b[0]);
    BPS_EXPECT(std::isnan(b[1]), "{}: rank {} b[1] = {}", setup, rank, b[1]);
    for (std::size_t i = 2; i < b.size(); ++i)
      BPS_EXPECT(b[i] == static_cast<float>(root), "{}: rank {} b[{}] = {}", setup, rank, i, b[i]);
  });
}

}  // namespace

#define BPS_MATRIX_CASES(NET, LOCAL, NAME)                                                     \
  TEST_CASE("matrix: " NAME " - every dtype at odd sizes - exact sums", "[cluster][matrix]") { \
    matrix_exact_sums<NET, LOCAL>(NAME);                                                       \
  }                                                                                            \
  TEST_CASE("matrix: " NAME " - cut-through in 1 KiB chunks - exact sums and average",         \
            "[cluster][matrix][cut_through]") {                                                \
    matrix_exact_sums<NET, LOCAL>(NAME " (cut-through)", 1024);                                \
    matrix_average_and_broadcast<NET, LOCAL>(NAME " (cut-through)", 1024);                     \
  }                                                                                            \
  TEST_CASE("matrix: " NAME " - average and broadcast", "[cluster][matrix]") {                 \
    matrix_average_and_broadcast<NET, LOCAL>(NAME);                                            \
  }

BPS_EVERY_SETUP(BPS_MATRIX_CASES)
