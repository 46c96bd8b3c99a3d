#include <atomic>
#include <cstdint>
#include <string>

#include <byteps/transport/transport.hpp>
#include <byteps/schedule/scheduler.hpp>
#include <byteps/partition/partitioner.hpp>
#include <byteps/local/local_collective.hpp>

#include <byteps/local/host.hpp>
#include <byteps/local/none.hpp>
#include <byteps/partition/by_bytes.hpp>
#include <byteps/schedule/fifo.hpp>
#include <byteps/schedule/priority.hpp>
#include <byteps/transport/tcp/tcp.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

// The policy concepts accept the shipped policies and reject types that miss one requirement.
// Each "missing" type below has a twin that adds only that requirement and is accepted, so a
// rejection is known to come from that requirement and not from a mistake in the stub.

namespace {

struct scheduler_missing_sent {
  explicit scheduler_missing_sent(const bps::Config&) {}
  void push(bps::send_task) {}
  std::optional<bps::send_task> pop() { return std::nullopt; }
  std::size_t queued() const { return 0; }
  std::size_t in_flight_bytes() const { return 0; }
};

struct scheduler_with_sent : scheduler_missing_sent {
  using scheduler_missing_sent::scheduler_missing_sent;
  void sent(std::size_t) {}
};

struct partitioner_missing_bound {
  explicit partitioner_missing_bound(const bps::Config&) {}
  std::vector<bps::partition_range> split(std::size_t, std::size_t) const { return {}; }
};

struct partitioner_with_bound : partitioner_missing_bound {
  using partitioner_missing_bound::partitioner_missing_bound;
  std::size_t bound() const { return 1; }
};

// A real local collective (not is_identity) must supply its steps; one without them is no
// LocalCollective.
struct local_missing_steps {
  static constexpr bool is_identity = false;
  explicit local_missing_steps(const bps::Config&) {}
  int local_rank() const { return 0; }
  int local_size() const { return 1; }
  void attach(const bps::local::cluster&) {}
  void shutdown() {}
};

struct local_with_steps : local_missing_steps {
  using local_missing_steps::local_missing_steps;
  struct tensor_state {};
  struct step_state {};
  void begin(bps::local::work&, step_state&) {}
  bps::local::step_status reduce_scatter(bps::local::work&, tensor_state&, step_state&) {
    return bps::local::step_status::done;
  }
  bps::local::step_status all_gather(bps::local::work&, tensor_state&, step_state&) {
    return bps::local::step_status::done;
  }
  bool progress() { return false; }
  std::string waiting_for(const bps::local::work&, const tensor_state&, const step_state&) const {
    return {};
  }
  std::atomic<std::uint32_t>* bell_word() { return nullptr; }
  void abort(const std::string&) {}
  void abandon(bps::local::work&, tensor_state&, step_state&) {}
};

}  // namespace

TEST_CASE("policy concepts accept the shipped policies and reject wrong types",
          "[policies][concepts]") {
  static_assert(bps::Transport<bps::transport::tcp>);
  static_assert(!bps::Transport<int>);
  static_assert(!bps::Transport<bps::schedule::fifo>);

  static_assert(bps::Scheduler<bps::schedule::fifo>);
  static_assert(bps::Scheduler<bps::schedule::priority>);
  static_assert(bps::Scheduler<scheduler_with_sent>);
  static_assert(!bps::Scheduler<scheduler_missing_sent>);
  static_assert(!bps::Scheduler<int>);
  static_assert(!bps::Scheduler<bps::partition::by_bytes>);

  static_assert(bps::Partitioner<bps::partition::by_bytes>);
  static_assert(bps::Partitioner<partitioner_with_bound>);
  static_assert(!bps::Partitioner<partitioner_missing_bound>);
  static_assert(!bps::Partitioner<int>);
  static_assert(!bps::Partitioner<bps::schedule::fifo>);

  static_assert(bps::LocalCollective<bps::local::none>);
  static_assert(bps::LocalCollective<bps::local::host>);
  static_assert(bps::LocalCollective<local_with_steps>);
  static_assert(!bps::LocalCollective<local_missing_steps>);
  static_assert(!bps::LocalCollective<int>);
  static_assert(!bps::LocalCollective<bps::partition::by_bytes>);

  SUCCEED("the policy concepts are checked at compile time");
}
