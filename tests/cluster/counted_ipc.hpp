#pragma once
// `counted_ipc`: ipc over tcp that adds what it did to a tally of its role when it goes (a
// communicator does not show its transport), `run_counted`, a cluster of such nodes, and
// `exact_sums_at`, the job the tests that count run on it.
#include "cluster.hpp"
#include "run_cluster.hpp"
#include "values.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace bps::test {

using ipc_tcp = transport::ipc<transport::tcp>;

// What the ipc transports of one role did, added up when each goes (after its node stopped).
struct tally {
  std::atomic<std::uint64_t> through_shm{0};  // payloads sent through a ring
  std::atomic<std::uint64_t> in_place{0};     // shared payloads a receiver took where they lay
  std::atomic<std::uint64_t> by_reference{0};  // payloads sent as their place in shared memory
};

struct counted_options : ipc_tcp::options {
  std::shared_ptr<tally> counts = std::make_shared<tally>();
  static counted_options from(const Config& cfg) {
    counted_options o;
    static_cast<ipc_tcp::options&>(o) = ipc_tcp::options::from(cfg);
    return o;
  }
};

// ipc over tcp that reports its counts to the test (a communicator does not show its transport).
class counted_ipc : public ipc_tcp {
 public:
  using options = counted_options;
  explicit counted_ipc(const Config& cfg) : counted_ipc(cfg, options::from(cfg)) {}
  counted_ipc(const Config& cfg, const options& o) : ipc_tcp(cfg, o), counts_(o.counts) {}
  counted_ipc(const counted_ipc&) = delete;
  counted_ipc& operator=(const counted_ipc&) = delete;
  ~counted_ipc() {
    counts_->through_shm += payloads_through_shm();
    counts_->in_place += payloads_in_place();
    counts_->by_reference += payloads_by_reference();
  }

 private:
  std::shared_ptr<tally> counts_;
};
static_assert(Transport<counted_ipc>);
template <class Local = local::none>
using counted_comm_of = Communicator<counted_ipc, Local, partition::by_bytes, schedule::priority>;
using counted_comm = counted_comm_of<>;

// Runs `body` on a cluster of counted ipc nodes, machine m with `local_sizes[m]` local ranks
// (default: one per worker); `workers` and `servers` get their roles' counts.
template <class Comm = counted_comm>
void run_counted(const Config& cfg, const std::function<void(std::type_identity_t<Comm>&)>& body,
                 const std::shared_ptr<tally>& workers, const std::shared_ptr<tally>& servers,
                 std::vector<int> local_sizes = {}) {
  if (local_sizes.empty()) local_sizes.assign(static_cast<std::size_t>(cfg.num_workers), 1);
  run_cluster<counted_ipc, Comm>(
      cfg, local_sizes, body, {},
      [&](const Config& c) {
        auto o = counted_options::from(c);
        o.counts = c.node_role == role::server ? servers : workers;
        return o;
      });
}

// Each of `types` (every dtype unless given) at each of `sizes` bytes for `rounds` rounds, as
// tensors `<prefix>.<dtype>.<bytes>`: exact sums.
template <class Comm>
void exact_sums_at(Comm& comm, const std::string& prefix, int rounds,
                   const std::vector<std::size_t>& sizes,
                   std::span<const dtype> types = all_dtypes) {
  for (int round = 0; round < rounds; ++round)
    for (std::size_t bytes : sizes)
      for (dtype t : types) {
        const std::size_t n = bytes / dtype_size(t);
        auto b = fill(t, n, comm.rank(), round);
        comm.push_pull(fmt::format("{}.{}.{}", prefix, dtype_name(t), bytes), b.data(), n, t)
            .wait();
        auto wrong = first_wrong(t, b, n, comm.size(), round);
        BPS_EXPECT(wrong == n, "{} of {} bytes, round {}: element {} is not the sum",
                   dtype_name(t), bytes, round, wrong);
      }
}

}  // namespace bps::test
