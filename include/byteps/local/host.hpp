#pragma once
/// @file
/// `bps::local::host`: several CPU processes per machine (BYTEPS_LOCAL_SIZE) meet in POSIX
/// shared memory. The local steps of a push_pull go partition by partition
/// (`PartitionedSteps`, local_collective.hpp): in `reduce_scatter` every local rank copies into
/// its slot of the tensor's segment the slices the others own, and waits for the others;
/// `reduce_part` sums one partition it owns over the other ranks' slots and its own tensor into
/// the segment's result, and the worker pushes it from
/// there at once while the next is summed; the sum lands back in the result, and `part_back`
/// stamps the partition there; `gather_part` copies a stamped partition out, whichever local
/// rank owns it, while the others are still on the network. The worker's stage thread runs the
/// steps and sleeps on the machine's futex doorbell, so an idle job costs no CPU.
///
/// Segments are unlinked as soon as every local rank mapped them; names that a crash could
/// leave (a segment some local rank never opened) are listed in the machine's control segment
/// and unlinked by every local rank when it shuts down, also after an error. With
/// `share_segments(true)` (the worker asks when its transport lets a colocated server read
/// payloads in place, `transport::ipc`) a tensor's segment keeps its name until a local rank
/// lets go of the tensor or shuts down, so the server can map it and sum the owned slices where
/// they lie. Such a job's control segment keeps its name too, with its local ranks' pids, and
/// each local rank holds a shared lock on it while it lives: what a crash of every local rank
/// of the machine leaves (the lock free though every rank had taken it), the next job that
/// shares segments on the machine removes when it attaches (as `transport::ipc` does for rings).
///
/// Failures: a local rank whose operation fails after its copy in marks the tensor failed in
/// its segment (`abandon`, or `all_gather` after a server refused its slices); the others then
/// fail that operation with a `usage_error` ("another local rank of this machine failed on this
/// tensor"), as `local::nccl` does, and the tensor is refused from then on. A segment that
/// cannot be made or met (`communicator_error`) fails the machine.
///
/// @par Thread Safety
/// The steps run on the worker's one stage thread.

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/shm_segment.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/local/shm.hpp"
#include "byteps/reduce/reducer.hpp"

namespace bps::local {

class host {
 public:
  static constexpr bool is_identity = false;
  using clock = std::chrono::steady_clock;

  explicit host(const Config& cfg)
      : local_rank_(cfg.local_rank), local_size_(cfg.local_size), log_(cfg.log, "local") {}
  host(const host&) = delete;
  host& operator=(const host&) = delete;
  ~host() { shutdown(); }

  /// Keeps tensor segments' names for the job, and names the segment of `work::owned` in the
  /// tensor's first operation (`work::owned_segment`). Before the first operation; the same on
  /// every local rank.
  void share_segments(bool on) noexcept { share_ = on; }

  int local_rank() const noexcept { return local_rank_; }
  int local_size() const noexcept { return local_size_; }

  /// Meets the machine's other local ranks in the control segment (at most 30 s).
  BYTEPS_DECL void attach(const cluster& c);

  /// A tensor's segment: a 64-byte block of counters, one slot per local rank, the result, and
  /// a stamp per partition (the round + 1 whose sum is in the result).
  struct tensor_state {
    detail::shm_segment segment;
    std::atomic<std::uint64_t>* arrived = nullptr;  // contributions, over all rounds
    std::atomic<std::uint32_t>* failed = nullptr;   // a rank's slices failed: tensor is done
    std::atomic<std::uint64_t>* stamps = nullptr;   // by partition (`work::parts`)
    std::size_t slot_bytes = 0;
    std::byte* slot(int i) const { return segment.data() + 64 + slot_bytes * i; }
    std::byte* result(int local_size) const { return slot(local_size); }
    tensor_state() = default;
    tensor_state(tensor_state&&) = delete;
    ~tensor_state() { segment.unlink(); }
  };
  /// Where an operation is: before its copy in, waiting for the other ranks' copies, past
  /// them (its partitions reduced, on the network, gathered).
  enum class step_state { arrive, reduce, flowing };

  std::atomic<std::uint32_t>* bell_word() const noexcept { return &control_block_->bell; }

  void begin(work&, step_state&) {
    if (control_block_ == nullptr)
      throw usage_error(
          "bps::local::host was not attached (the communicator attaches it when "
          "it joins the cluster)");
  }

  BYTEPS_DECL step_status reduce_scatter(work& w, tensor_state& t, step_state& s);

  static constexpr partition_steps partitioned{};

  /// Sums partition `i` (one this rank owns) over the other local ranks' slots and this rank's
  /// tensor into the result.
  BYTEPS_DECL bool reduce_part(work& w, tensor_state& t, std::size_t i);

  /// Partition `i`'s sum is in the result: the other local ranks may copy it out.
  void part_back(work& w, tensor_state& t, std::size_t i) {
    t.stamps[i].store(w.round + 1, std::memory_order_release);
    ring();
  }

  /// Copies partition `i`'s sum into this rank's buffer once it is back; false until then.
  BYTEPS_DECL bool gather_part(work& w, tensor_state& t, std::size_t i);

  /// Ends the operation once every partition was gathered (the engine's part), or tells the
  /// other local ranks that this rank's partitions failed.
  BYTEPS_DECL step_status all_gather(work& w, tensor_state& t, step_state&);

  bool progress() { return false; }

  BYTEPS_DECL std::string waiting_for(const work& w, const tensor_state& t,
                                      const step_state& s) const;

  void abort(const std::string&) noexcept {}

  /// An operation that got past its copy in failed here: the tensor is done for every local
  /// rank, which the others learn at once instead of at their deadline.
  void abandon(work&, tensor_state& t, step_state& s) noexcept {
    if (s == step_state::arrive || t.failed == nullptr) return;
    t.failed->store(1);
    ring();
  }

  BYTEPS_DECL void shutdown();

 private:
  static constexpr std::uint64_t control_fingerprint = 0xc0417202;
  struct control_block {
    static constexpr std::uint32_t capacity = 16384;
    static constexpr std::uint32_t max_ranks = 1024;  // BYTEPS_LOCAL_SIZE's bound
    std::atomic<std::uint32_t> bell;
    std::atomic<std::uint32_t> registered;
    std::atomic<std::uint32_t> local_size;
    std::atomic<std::int32_t> pids[max_ranks];  // by local rank; 0 until it holds its lock
    std::uint64_t keys[capacity];  // tensor segments created, for cleanup after a crash
  };

  // Whether every local rank of a job got as far as taking its lock (it writes its pid after):
  // if so, a lock that is free means that none of them lives any more.
  static bool all_attached(const control_block& b) {
    const auto n = std::min(b.local_size.load(), control_block::max_ranks);
    if (n == 0) return false;
    for (std::uint32_t i = 0; i < n; ++i)
      if (b.pids[i].load() <= 0) return false;
    return true;
  }

  // Removes the segments of jobs whose local ranks all died on this machine: each such job's
  // control segment (named `...-control`, kept while it shared segments) lists them.
  BYTEPS_DECL static void remove_orphan_segments();
  struct tensor_block {
    std::atomic<std::uint64_t> arrived;
    std::atomic<std::uint32_t> failed;
    std::byte pad[52];
  };
  static_assert(sizeof(tensor_block) == 64);

  void ring() { doorbell(&control_block_->bell).ring(); }

  std::string tensor_segment(std::uint64_t key) const {
    return segment_name(cluster_.job_id, cluster_.machine, fmt::format("{:016x}", key));
  }

  std::uint64_t target(const work& w) const {
    return static_cast<std::uint64_t>(local_size_) * (w.round + 1);
  }

  BYTEPS_DECL void check_peers(const work& w, const tensor_state& t) const;

  BYTEPS_DECL void open(tensor_state& t, const work& w);

  int local_rank_;
  int local_size_;
  bool share_ = false;
  logger log_;
  cluster cluster_;
  detail::shm_segment control_;
  control_block* control_block_ = nullptr;
  int alive_lock_ = -1;  // the control segment, shared-locked while this rank lives
  std::vector<const std::byte*> inputs_;  // stage thread only
};

static_assert(LocalCollective<host> && PartitionedSteps<host>);

}  // namespace bps::local

#if BYTEPS_INCLUDE_BODIES
#include "byteps/local/impl/host.hpp"
#endif
