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
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bps {

/// One tensor's figures over the window.
struct tensor_stats {
  std::string name;
  std::uint64_t operations = 0;
  std::uint64_t bytes = 0;  ///< the tensor's bytes, once per operation
  double busy_seconds = 0;  ///< the union of its operations' in-flight intervals
  double bytes_per_second() const noexcept { return busy_seconds > 0 ? bytes / busy_seconds : 0; }
};

/// A worker's communication over the last `window_seconds` (operations that finished in it).
struct comm_stats {
  double window_seconds = 0;     ///< how far back the figures reach (the window, or less so far)
  std::uint64_t operations = 0;  ///< push_pulls and broadcasts that succeeded
  std::uint64_t bytes = 0;       ///< their tensors' bytes (this process's share with local ranks)
  double busy_seconds = 0;       ///< time at least one of them was in flight
  /// Bytes per second of in-flight time: the speed of communication itself, whatever the
  /// trainer did between operations.
  double bytes_per_second() const noexcept { return busy_seconds > 0 ? bytes / busy_seconds : 0; }
  /// Mean time of a partition in each stage: in the scheduler's queue, being sent (handed to
  /// the transport until it is done with the payload), and waiting for the server's answer
  /// (the other workers' pushes, the sum, the way back).
  double queued_seconds = 0, sending_seconds = 0, answering_seconds = 0;
  std::uint64_t partitions = 0;  ///< partitions the means are over
  /// Bytes pushed to each server since joining (re-sends after a failover included).
  std::vector<std::uint64_t> bytes_per_server;
  /// Tensor fusion (BYTEPS_FUSION_BYTES) since joining: `push_batch` frames sent, and the
  /// partitions that went in them (each also counted in `bytes_per_server`); `answer_batch`
  /// frames received, and the answers in them.
  std::uint64_t batches = 0, batched_partitions = 0;
  std::uint64_t answer_batches = 0, batched_answers = 0;
  std::size_t in_flight = 0;          ///< operations not yet done, now
  /// Since joining: the operation records this worker made (one per push_pull or broadcast
  /// that reached the network, whatever its local stage) and their partition records (one per
  /// partition this process pushes).
  std::uint64_t operation_records = 0, partition_records = 0;
  std::vector<tensor_stats> tensors;  ///< most bytes first
};

namespace worker {

/// Stage times of one operation's partitions, summed; reset when the operation starts.
struct op_timing {
  std::chrono::steady_clock::time_point started;
  double queued = 0, sending = 0, answering = 0;  ///< seconds, summed over partitions
  std::uint64_t partitions = 0;
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
  void operation(const std::string& tensor, std::uint64_t bytes, const op_timing& t) {
    const auto now = clock::now();
    records_.push_back(record{&tensor, bytes, t.started, now, t});
    forget_before(now - window_);
    if (records_.size() > max_records) records_.pop_front();
  }

  comm_stats snapshot(std::size_t in_flight) {
    const auto now = clock::now();
    forget_before(now - window_);
    comm_stats s;
    s.window_seconds = seconds(std::min<clock::duration>(window_, now - since_));
    s.bytes_per_server = bytes_per_server_;
    s.batches = batches_;
    s.batched_partitions = batched_partitions_;
    s.answer_batches = answer_batches_;
    s.batched_answers = batched_answers_;
    s.in_flight = in_flight;
    std::unordered_map<const std::string*,
                       std::vector<std::pair<clock::time_point, clock::time_point>>>
        spans;
    std::vector<std::pair<clock::time_point, clock::time_point>> all;
    std::unordered_map<const std::string*, tensor_stats> per_tensor;
    for (const auto& r : records_) {
      ++s.operations;
      s.bytes += r.bytes;
      s.queued_seconds += r.timing.queued;
      s.sending_seconds += r.timing.sending;
      s.answering_seconds += r.timing.answering;
      s.partitions += r.timing.partitions;
      all.emplace_back(r.started, r.finished);
      spans[r.tensor].emplace_back(r.started, r.finished);
      auto& t = per_tensor[r.tensor];
      ++t.operations;
      t.bytes += r.bytes;
    }
    if (s.partitions > 0) {
      s.queued_seconds /= static_cast<double>(s.partitions);
      s.sending_seconds /= static_cast<double>(s.partitions);
      s.answering_seconds /= static_cast<double>(s.partitions);
    }
    s.busy_seconds = union_seconds(all);
    for (auto& [name, t] : per_tensor) {
      t.name = *name;
      t.busy_seconds = union_seconds(spans[name]);
      s.tensors.push_back(std::move(t));
    }
    std::sort(s.tensors.begin(), s.tensors.end(), [](const auto& a, const auto& b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
    });
    return s;
  }

  /// The length of the union of `spans` (sorted here).
  static double union_seconds(std::vector<std::pair<clock::time_point, clock::time_point>>& spans) {
    std::sort(spans.begin(), spans.end());
    clock::duration total{};
    clock::time_point reach{};
    bool any = false;
    for (const auto& [from, to] : spans) {
      if (!any || from > reach) {
        total += to - from;
        reach = to;
        any = true;
      } else if (to > reach) {
        total += to - reach;
        reach = to;
      }
    }
    return seconds(total);
  }

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

  void forget_before(clock::time_point t) {
    while (!records_.empty() && records_.front().finished < t) records_.pop_front();
  }

  clock::duration window_;
  clock::time_point since_;
  std::deque<record> records_;
  std::vector<std::uint64_t> bytes_per_server_;
  std::uint64_t batches_ = 0, batched_partitions_ = 0;
  std::uint64_t answer_batches_ = 0, batched_answers_ = 0;
};

}  // namespace worker
}  // namespace bps
