#pragma once
/// @file
/// `bps::comm_stats`, what `Communicator::stats()` returns, and `worker::stats_recorder`, which
/// gathers it. BytePS's own speed figure divides bytes by the time between two prints, so an idle
/// trainer looks slow; here throughput is bytes over the time operations were actually in flight
/// (the union of their call-to-done intervals), over a sliding window, in total and per tensor.
///
/// The recorder is not thread-safe: the worker's mutex guards it. It costs a few clock reads per
/// partition and one record per operation.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byteps/core/linkage.hpp"
#include "byteps/core/stage.hpp"

namespace bps {

/// The time partitions spent in one stage (`bps::stage`).
struct stage_time {
  double seconds = 0;            ///< summed over the partitions
  std::uint64_t partitions = 0;  ///< partitions that passed through it
  /// Mean seconds a partition spent in the stage; 0 when none passed through it.
  double mean() const noexcept {
    return partitions > 0 ? seconds / static_cast<double>(partitions) : 0;
  }
};

/// A `stage_time` per stage, indexed by `bps::stage`.
struct stage_times {
  std::array<stage_time, stage_count> by_stage{};
  stage_time& operator[](stage s) noexcept { return by_stage[static_cast<std::size_t>(s)]; }
  const stage_time& operator[](stage s) const noexcept {
    return by_stage[static_cast<std::size_t>(s)];
  }
  /// One partition (or one whole-tensor step) spent `seconds` in `s`.
  void add(stage s, double seconds) noexcept {
    auto& t = (*this)[s];
    t.seconds += seconds;
    ++t.partitions;
  }
  void add(const stage_times& other) noexcept {
    for (std::size_t i = 0; i < stage_count; ++i) {
      by_stage[i].seconds += other.by_stage[i].seconds;
      by_stage[i].partitions += other.by_stage[i].partitions;
    }
  }
};

/// One tensor's figures over the window.
struct tensor_stats {
  std::string name;
  std::uint64_t operations = 0;
  std::uint64_t bytes = 0;  ///< the tensor's bytes, once per operation
  double busy_seconds = 0;  ///< the union of its operations' in-flight intervals
  double bytes_per_second() const noexcept { return busy_seconds > 0 ? bytes / busy_seconds : 0; }
};

/// What a worker's operations that succeeded over some span of time amount to: the window of
/// `comm_stats`, or `comm_totals`'s whole run.
struct comm_figures {
  std::uint64_t operations = 0;  ///< push_pulls and broadcasts that succeeded
  std::uint64_t bytes = 0;       ///< their tensors' bytes (this process's share with local ranks)
  double busy_seconds = 0;       ///< time at least one of them was in flight
  /// Bytes per second of in-flight time: the speed of communication itself, whatever the
  /// trainer did between operations.
  double bytes_per_second() const noexcept { return busy_seconds > 0 ? bytes / busy_seconds : 0; }
  /// The time of the partitions of those operations in each stage of the pipeline, by the
  /// names of `bps::stage`: `stages[stage::queue]` (the scheduler's queue), `stage::push`
  /// (handed to the transport until it let go of the payload), `stage::pull` (the other
  /// workers' pushes, the sum, the way back), and with a local collective `local_reduce` and
  /// `local_gather` (`copy_out` and `copy_in` with a device). A stage a policy runs on the
  /// whole tensor counts once per operation.
  stage_times stages;
  /// Mean seconds a partition spent in `s`.
  double mean_seconds(stage s) const noexcept { return stages[s].mean(); }
};

/// A worker's communication since it joined, so that a trainer that reads the stats after a
/// long evaluation still sees what was done.
struct comm_totals : comm_figures {
  double seconds = 0;  ///< since joining
};

/// A worker's communication over the last `window_seconds` (operations that finished in it),
/// and in `since_start` since it joined.
struct comm_stats : comm_figures {
  double window_seconds = 0;  ///< how far back the figures reach (the window, or less so far)
  /// Bytes pushed to each server since joining (re-sends after a failover included).
  std::vector<std::uint64_t> bytes_per_server;
  /// Tensor fusion (BYTEPS_FUSION_BYTES) since joining: `push_batch` frames sent, and the
  /// partitions that went in them (each also counted in `bytes_per_server`); `answer_batch`
  /// frames received, and the answers in them.
  std::uint64_t batches = 0, batched_partitions = 0;
  std::uint64_t answer_batches = 0, batched_answers = 0;
  std::size_t in_flight = 0;  ///< operations not yet done, now
  /// Since joining: the operation records this worker made (one per push_pull or broadcast
  /// that reached the network, whatever its local stage) and their partition records (one per
  /// partition this process pushes).
  std::uint64_t operation_records = 0, partition_records = 0;
  std::vector<tensor_stats> tensors;  ///< most bytes first
  comm_totals since_start;
};

namespace worker {

/// Stage times of one operation's partitions, summed; reset when the operation starts.
struct op_timing {
  std::chrono::steady_clock::time_point started;
  stage_times stages;
};

/// The length of the union of intervals that arrive in the order of their ends (each ends no
/// earlier than any before it: an operation's, added when it finishes), in bounded memory. It
/// keeps the disjoint runs so far, merged as a later interval reaches back over them; past
/// `max_runs` the oldest is settled, and a later interval that reaches back over a settled run
/// counts from that run's end. So it is exact unless one interval spans `max_runs` idle gaps.
class running_union {
 public:
  using clock = std::chrono::steady_clock;

  explicit running_union(std::size_t max_runs = std::size_t{1} << 16) : max_runs_(max_runs) {}

  BYTEPS_DECL void add(clock::time_point from, clock::time_point to);

  double seconds() const { return std::chrono::duration<double>(settled_total_ + open_).count(); }

 private:
  std::size_t max_runs_;
  std::deque<std::pair<clock::time_point, clock::time_point>> runs_;  // disjoint, in order
  clock::duration open_{}, settled_total_{};
  clock::time_point settled_reach_{};
  bool settled_ = false;
};

class stats_recorder {
 public:
  using clock = std::chrono::steady_clock;

  explicit stats_recorder(std::chrono::milliseconds window = std::chrono::seconds(10))
      : window_(window), since_(clock::now()) {}

  void servers(std::size_t n) { bytes_per_server_.assign(n, 0); }
  void pushed(int server, std::size_t bytes) {
    if (server >= 0 && static_cast<std::size_t>(server) < bytes_per_server_.size())
      bytes_per_server_[static_cast<std::size_t>(server)] += bytes;
  }

  /// A `push_batch` of `members` partitions was sent.
  void batched(std::size_t members) {
    ++batches_;
    batched_partitions_ += members;
  }

  /// An `answer_batch` of `answers` records came in.
  void answers_batched(std::size_t answers) {
    ++answer_batches_;
    batched_answers_ += answers;
  }

  /// An operation on `tensor` of `bytes` finished successfully now.
  BYTEPS_DECL void operation(const std::string& tensor, std::uint64_t bytes, const op_timing& t);

  /// The local stage's times of an operation that finished successfully now (its network
  /// stages came with `operation`).
  void local_steps(const stage_times& t) {
    const auto now = clock::now();
    totals_.stages.add(t);
    local_records_.push_back(local_record{now, t});
    forget_before(now - window_);
    if (local_records_.size() > max_records) local_records_.pop_front();
  }

  BYTEPS_DECL comm_stats snapshot(std::size_t in_flight);

  /// The length of the union of `spans` (sorted here).
  BYTEPS_DECL static double union_seconds(
      std::vector<std::pair<clock::time_point, clock::time_point>>& spans);

  static double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }

 private:
  /// Bounds the memory of a job that runs very many small operations.
  static constexpr std::size_t max_records = 1 << 16;

  struct record {
    const std::string* tensor;  // the op table's name: tensors are never erased
    std::uint64_t bytes;
    clock::time_point started, finished;
    op_timing timing;
  };

  struct local_record {
    clock::time_point finished;
    stage_times stages;
  };

  BYTEPS_DECL void forget_before(clock::time_point t);

  clock::duration window_;
  clock::time_point since_;
  std::deque<record> records_;
  std::deque<local_record> local_records_;
  std::vector<std::uint64_t> bytes_per_server_;
  std::uint64_t batches_ = 0, batched_partitions_ = 0;
  std::uint64_t answer_batches_ = 0, batched_answers_ = 0;
  comm_totals totals_;  // all but `seconds` and `busy_seconds`, kept as they come
  running_union busy_since_start_;
};

}  // namespace worker
}  // namespace bps

#if BYTEPS_INCLUDE_BODIES
#include "byteps/worker/impl/stats.hpp"
#endif
