#pragma once
/// @file
/// `bps::local::host`: several CPU processes per machine (BYTEPS_LOCAL_SIZE) meet in POSIX
/// shared memory. The local steps of a push_pull go partition by partition
/// (`PartitionedSteps`, local_collective.hpp): in `reduce_scatter` every local rank copies its
/// tensor into its slot of the tensor's segment and waits for the others; `reduce_part` sums one
/// partition it owns over all slots into the segment's result, and the worker pushes it from
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

#include <fmt/core.h>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
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
  void attach(const cluster& c) {
    cluster_ = c;
    log_.rename(fmt::format("worker {}.{} local", c.machine, local_rank_));
    const auto deadline = clock::now() + std::chrono::seconds(30);
    if (share_) remove_orphan_segments();  // before this job's own control exists
    control_ = detail::shm_segment(segment_name(c.job_id, c.machine, "control"),
                                   sizeof(control_block), control_fingerprint,
                                   share_ ? 0 : local_size_, deadline, "local ranks meeting");
    control_block_ = reinterpret_cast<control_block*>(control_.data());
    control_block_->local_size.store(static_cast<std::uint32_t>(local_size_));
    // A shared lock on the control segment for as long as this rank lives (the kernel drops it
    // when the process dies), taken before the pid is written, which marks the rank attached:
    // a job that sweeps leftovers tells a live rank by its lock alone, which another pid
    // namespace cannot hide.
    if (share_) {
      alive_lock_ = ::shm_open(control_.name().c_str(), O_RDONLY, 0);
      if (alive_lock_ >= 0) ::flock(alive_lock_, LOCK_SH);
    }
    if (local_rank_ >= 0 && static_cast<std::uint32_t>(local_rank_) < control_block::max_ranks)
      control_block_->pids[local_rank_].store(static_cast<std::int32_t>(::getpid()));
    log_.info("local ranks of machine {} meet in shared memory /dev/shm{}",
              c.machine, segment_name(c.job_id, c.machine, "*"));
  }

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
      throw usage_error("bps::local::host was not attached (the communicator attaches it when "
                        "it joins the cluster)");
  }

  step_status reduce_scatter(work& w, tensor_state& t, step_state& s) {
    if (s == step_state::arrive) {
      if (t.arrived == nullptr) open(t, w);
      if (w.contributes)
        std::memcpy(t.slot(local_rank_), w.data, w.count * dtype_size(w.type));
      else
        reduce::fill_negative_zero(t.slot(local_rank_), w.count, w.type);
      t.arrived->fetch_add(1, std::memory_order_acq_rel);
      ring();
      s = step_state::reduce;
      return step_status::moved;
    }
    check_peers(w, t);
    if (t.arrived->load(std::memory_order_acquire) < target(w)) return step_status::waiting;
    const auto esize = dtype_size(w.type);
    w.owned = t.result(local_size_) +
              owned_range(w.count, local_rank_, local_size_, cluster_.slices).first * esize;
    if (share_ && w.round == 0) w.owned_segment = {t.segment.name(), t.segment.whole()};
    s = step_state::flowing;
    return step_status::done;
  }

  static constexpr partition_steps partitioned{};

  /// Sums partition `i` (one this rank owns) over every local rank's slot into the result.
  bool reduce_part(work& w, tensor_state& t, std::size_t i) {
    const part& p = w.parts[i];
    const auto esize = dtype_size(w.type);
    inputs_.clear();
    for (int l = 0; l < local_size_; ++l) inputs_.push_back(t.slot(l) + p.first * esize);
    reduce::sum_of(t.result(local_size_) + p.first * esize, inputs_, p.last - p.first, w.type,
                   scratch_);
    return true;
  }

  /// Partition `i`'s sum is in the result: the other local ranks may copy it out.
  void part_back(work& w, tensor_state& t, std::size_t i) {
    t.stamps[i].store(w.round + 1, std::memory_order_release);
    ring();
  }

  /// Copies partition `i`'s sum into this rank's buffer once it is back; false until then.
  bool gather_part(work& w, tensor_state& t, std::size_t i) {
    check_peers(w, t);
    if (t.stamps[i].load(std::memory_order_acquire) < w.round + 1) return false;
    const part& p = w.parts[i];
    const auto esize = dtype_size(w.type);
    std::memcpy(static_cast<std::byte*>(w.data) + p.first * esize,
                t.result(local_size_) + p.first * esize, (p.last - p.first) * esize);
    return true;
  }

  /// Ends the operation once every partition was gathered (the engine's part), or tells the
  /// other local ranks that this rank's partitions failed.
  step_status all_gather(work& w, tensor_state& t, step_state&) {
    if (w.error) {  // this rank's slices failed: the other ranks must not wait for them
      t.failed->store(1);
      ring();
      std::rethrow_exception(w.error);
    }
    return step_status::done;
  }

  bool progress() { return false; }

  std::string waiting_for(const work& w, const tensor_state& t, const step_state& s) const {
    if (s == step_state::arrive) return "this local rank's stage thread did not get to it";
    if (s == step_state::reduce) {
      const auto have = t.arrived->load();
      const auto behind = target(w) - std::min(have, target(w));
      return fmt::format("{} of the {} local ranks of machine {} have not called it. Does every "
                         "local rank call it?",
                         behind, local_size_, cluster_.machine);
    }
    std::size_t missing = 0;
    for (std::size_t i = 0; i < w.parts.size(); ++i)
      if (t.stamps[i].load() < w.round + 1) ++missing;
    return fmt::format("{} of its {} partitions have not come back to machine {} from the other "
                       "local ranks. Does every local rank call it?",
                       missing, w.parts.size(), cluster_.machine);
  }

  void abort(const std::string&) noexcept {}

  /// An operation that got past its copy in failed here: the tensor is done for every local
  /// rank, which the others learn at once instead of at their deadline.
  void abandon(work&, tensor_state& t, step_state& s) noexcept {
    if (s == step_state::arrive || t.failed == nullptr) return;
    t.failed->store(1);
    ring();
  }

  void shutdown() {
    // Names some local rank may never map (the job ended early): gone now.
    if (control_block_ != nullptr) {
      const auto n = std::min<std::uint32_t>(control_block_->registered.load(),
                                             control_block::capacity);
      for (std::uint32_t i = 0; i < n; ++i)
        if (auto key = control_block_->keys[i]; key != 0)
          ::shm_unlink(tensor_segment(key).c_str());
    }
    control_.unlink();
    if (alive_lock_ >= 0) ::close(alive_lock_);
    alive_lock_ = -1;
  }

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
  static void remove_orphan_segments() {
    constexpr std::size_t bytes = sizeof(detail::segment_header) + sizeof(control_block);
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
      const std::string file = entry.path().filename().string();
      if (!file.starts_with("bps-") || file.starts_with("bps-ipc-") || !file.ends_with("-control"))
        continue;
      const std::string name = "/" + file;
      const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
      if (fd < 0) continue;
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {  // some local rank of that job lives
        ::close(fd);
        continue;
      }
      struct stat st{};
      void* p = MAP_FAILED;
      if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == bytes)
        p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        continue;
      }
      const auto* header = static_cast<const detail::segment_header*>(p);
      const auto* block = reinterpret_cast<const control_block*>(static_cast<const std::byte*>(p) +
                                                                 sizeof(detail::segment_header));
      std::vector<std::string> doomed;
      if (header->magic.load() == detail::segment_header::ready_magic &&
          header->fingerprint == control_fingerprint && header->users == 0 &&
          all_attached(*block)) {
        const auto prefix = name.substr(0, name.size() - std::strlen("control"));
        const auto n = std::min<std::uint32_t>(block->registered.load(), control_block::capacity);
        for (std::uint32_t i = 0; i < n; ++i)
          if (block->keys[i] != 0)
            doomed.push_back(fmt::format("{}{:016x}", prefix, block->keys[i]));
        doomed.push_back(name);
      }
      ::munmap(p, bytes);
      for (const auto& d : doomed) ::shm_unlink(d.c_str());
      ::close(fd);  // drops the lock, after the names are gone
    }
  }
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

  void check_peers(const work& w, const tensor_state& t) const {
    if (t.failed->load() != 0)
      throw usage_error(w.what + ": another local rank of this machine failed on this tensor "
                                 "(its log says why)");
  }

  void open(tensor_state& t, const work& w) {
    t.slot_bytes = (w.count * dtype_size(w.type) + 63) / 64 * 64;
    const std::size_t stamp_bytes = w.parts.size() * sizeof(std::uint64_t);
    const std::size_t bytes =
        64 + t.slot_bytes * static_cast<std::size_t>(local_size_ + 1) + stamp_bytes;
    const std::uint64_t fingerprint = tensor_key(fmt::format(
        "{} {} {} {}", w.count, dtype_name(w.type), local_size_, w.parts.size()));
    const auto index = control_block_->registered.fetch_add(1);
    if (index < control_block::capacity) control_block_->keys[index] = w.key;
    t.segment = detail::shm_segment(tensor_segment(w.key), bytes, fingerprint,
                                    share_ ? 0 : local_size_, w.deadline, w.what);
    auto* block = reinterpret_cast<tensor_block*>(t.segment.data());
    t.arrived = &block->arrived;
    t.failed = &block->failed;
    t.stamps = reinterpret_cast<std::atomic<std::uint64_t>*>(
        t.result(local_size_) + t.slot_bytes);
  }

  int local_rank_;
  int local_size_;
  bool share_ = false;
  logger log_;
  cluster cluster_;
  detail::shm_segment control_;
  control_block* control_block_ = nullptr;
  int alive_lock_ = -1;  // the control segment, shared-locked while this rank lives
  std::vector<const std::byte*> inputs_;  // stage thread only
  std::vector<std::byte> scratch_;        // stage thread only
};

static_assert(LocalCollective<host> && PartitionedSteps<host>);

}  // namespace bps::local
