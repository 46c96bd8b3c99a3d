#pragma once
/// @file
/// `bps::worker::op_table`: a worker's bookkeeping: the tensors the servers know (name, shape,
/// round, which servers know the name) and the partitions whose sums it still awaits. An
/// operation's partitions may span several of them (a local stage's owned slices are tensors of
/// their own on the wire). An operation is released (its handle completes, or its local stage
/// goes on) only when nothing will touch its buffer again: no payload in the transport, no
/// answer being written, and every answer in or the op failed.
///
/// Not thread-safe: the worker's mutex guards it.

#include <fmt/core.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "byteps/compress/compressor.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/partition/partitioner.hpp"
#include "byteps/wire/declare.hpp"
#include "byteps/worker/stats.hpp"

namespace bps::worker {

using op_ptr = std::shared_ptr<detail::op_state>;

struct tensor {
  std::string name;
  dtype type = dtype::float32;
  std::size_t bytes = 0;
  std::uint64_t round = 0;
  std::vector<partition_range> parts;
  std::vector<bool> declared;  ///< by server: has it seen this tensor's name?
  op_ptr active;
  std::string compressor;  ///< the name of its compressor; empty for none
  /// Its compressor is decoded by the servers (not summable): pushes are flagged `compressed`
  /// and carry the raw size first; the servers' answers are their own encoding.
  bool server_decoded = false;
  /// The `declare` payload (wire/declare.hpp): the name, and the recipe when server_decoded.
  std::vector<std::byte> declaration;
  /// With a compressor, by partition: its compressor, its push in flight (encoded), and the
  /// encoded sum being read. Empty without one.
  std::vector<std::unique_ptr<compress::any>> codecs;
  std::vector<std::vector<std::byte>> encoded, answers;
  /// By partition: the learning rate version its compressor was last given (dispatcher.hpp).
  std::vector<std::uint64_t> rate_seen;
  op_timing timing;  ///< the operation in flight's stage times, for `stats()`
};

struct pending_part {
  op_ptr op;
  std::size_t offset = 0;  ///< in its tensor (the wire's offset)
  std::size_t bytes = 0;
  int server = 0;
  std::uint64_t round = 0;
  std::size_t data_offset = 0;  ///< where its bytes lie in `op->data`
  std::size_t index = 0;        ///< its position among the operation's partitions
  int priority = 0;             ///< for the scheduler, when it is released
  std::uint64_t order = 0;
  bool queued = false;      ///< handed to the scheduler (a local stage releases each when reduced)
  bool dispatched = false;  ///< left the scheduler's queue (sent, or held for a replacement)
  bool receiving = false;   ///< failover: its answer is being written into the kept sum
  std::size_t answered_bytes = 0;  ///< cut-through: bytes of the answer's pieces in so far
  std::chrono::steady_clock::time_point queued_at{}, dispatched_at{}, sent_at{};  ///< `stats()`
};

class op_table {
 public:
  using clock = std::chrono::steady_clock;

  /// What finished operations took: `Communicator::stats()`.
  stats_recorder& stats() noexcept { return stats_; }

  /// The tensor `key` (named `name`, `count` elements of `op`'s dtype) that `op` runs on, created
  /// on first use. Throws `usage_error` when the name's key is taken by another name, the shape
  /// or compressor differs from the first use, or an op is still in flight. `codec` (null for
  /// none) makes the tensor's compressors on first use.
  template <Partitioner P>
  tensor& begin(const op_ptr& op, std::uint64_t key, std::string name, std::size_t count,
                const P& partitioner, std::size_t servers, const compress::spec* codec) {
    const std::size_t bytes = count * dtype_size(op->type);
    auto [it, fresh] = tensors_.try_emplace(key);
    tensor& t = it->second;
    if (fresh) {
      try {
        t.declaration = declaration_of(op->what, name, codec);
      } catch (...) {
        tensors_.erase(it);
        throw;
      }
      t.name = std::move(name);
      if (auto r = start_rounds_.find(key); r != start_rounds_.end()) t.round = r->second;
      t.type = op->type;
      t.bytes = bytes;
      t.parts = partitioner.split(bytes, dtype_size(op->type));
      t.declared.assign(servers, false);
      if (codec != nullptr) {
        t.compressor = codec->name();
        t.server_decoded = codec->declared().has_value();
        for (std::size_t i = 0; i < t.parts.size(); ++i) t.codecs.push_back(codec->make());
        t.encoded.resize(t.parts.size());
        t.answers.resize(t.parts.size());
        t.rate_seen.assign(t.parts.size(), 0);
      }
    } else if (t.name != name) {
      throw usage_error(
          fmt::format("tensor names '{}' and '{}' hash to the same key; rename one", t.name, name));
    } else if (t.type != op->type || t.bytes != bytes) {
      throw usage_error(fmt::format(
          "{}: the tensor was first used as {} x {}; this call passes "
          "{} x {}",
          op->what, t.bytes / dtype_size(t.type), dtype_name(t.type), count, dtype_name(op->type)));
    } else if (auto asked = codec != nullptr ? codec->name() : std::string();
               asked != t.compressor) {
      auto describe = [](const std::string& c) {
        return c.empty() ? std::string("none") : fmt::format("compressor '{}'", c);
      };
      throw usage_error(
          fmt::format("{}: the tensor was first used with {}; this call asks for "
                      "{}. A tensor keeps its first compressor",
                      op->what, describe(t.compressor), describe(asked)));
    } else if (t.active) {
      throw usage_error(
          fmt::format("{}: the previous operation on this tensor is still in "
                      "flight; wait on its handle first",
                      op->what));
    }
    return t;
  }

  /// What a `declare` of the tensor carries: its name and, for a compressor the servers
  /// decode, the recipe they make theirs from.
  BYTEPS_DECL static std::vector<std::byte> declaration_of(const std::string& what,
                                                           const std::string& name,
                                                           const compress::spec* codec);

  /// A worker that joined a running job: tensor `key`, when first used, starts at `round`.
  void start_at(std::uint64_t key, std::uint64_t round) { start_rounds_[key] = round; }

  tensor& at(std::uint64_t key) { return tensors_.at(key); }
  /// Calls `f(key, tensor&)` for every tensor used so far.
  template <class F>
  void for_each_tensor(F&& f) {
    for (auto& [key, t] : tensors_) f(key, t);
  }
  tensor* find_tensor(std::uint64_t key) {
    auto it = tensors_.find(key);
    return it == tensors_.end() ? nullptr : &it->second;
  }

  /// `op` runs on tensor `key` from now until it is released.
  void activate(const op_ptr& op, std::uint64_t key, tensor& t) {
    t.active = op;
    t.timing = op_timing{};
    t.timing.started = clock::now();
    auto& keys = tensors_of_[op.get()];
    if (keys.empty()) ++records_;
    keys.push_back(key);
  }

  void await(key_id id, pending_part p) {
    ++part_records_;
    pending_[id] = std::move(p);
  }

  /// The partition awaiting this answer, or nullptr (its op failed, or the answer is stale).
  pending_part* awaiting(key_id id) {
    auto it = pending_.find(id);
    return it == pending_.end() ? nullptr : &it->second;
  }

  /// An answer for `id` was written into `op`'s buffer.
  BYTEPS_DECL void answered(key_id id, const op_ptr& op);

  /// Partitions of `op` queued and still unanswered, by server.
  BYTEPS_DECL std::vector<std::size_t> unanswered_by_server(const detail::op_state& op,
                                                            std::size_t servers) const;

  BYTEPS_DECL std::vector<op_ptr> active() const;

  /// Operation records and partition records made since the worker joined (one of each per
  /// push_pull and partition, whatever the local stage: `comm_stats`).
  std::uint64_t records() const noexcept { return records_; }
  std::uint64_t part_records() const noexcept { return part_records_; }

  // `op` by value here and below: callers pass `tensor::active`, which release resets.
  BYTEPS_DECL void fail(op_ptr op, std::exception_ptr e);

  BYTEPS_DECL void release_if_done(op_ptr op);

 private:
  std::unordered_map<std::uint64_t, tensor> tensors_;  // never erased: frames point at names
  std::unordered_map<key_id, pending_part, key_id_hash> pending_;
  std::unordered_map<std::uint64_t, std::uint64_t> start_rounds_;  // see start_at
  /// The tensors each operation in flight runs on (several for a local stage's owned slices).
  std::unordered_map<const detail::op_state*, std::vector<std::uint64_t>> tensors_of_;
  std::uint64_t records_ = 0, part_records_ = 0;
  stats_recorder stats_;
};

}  // namespace bps::worker

#if BYTEPS_INCLUDE_BODIES
#include "byteps/worker/impl/op_table.hpp"
#endif
