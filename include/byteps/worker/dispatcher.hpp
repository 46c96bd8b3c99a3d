#pragma once
/// @file
/// `bps::worker::dispatcher<Partitioner, Scheduler>`: what a worker sends next. It cuts each
/// operation's tensor into partitions, places each on its server, records what is awaited in the
/// operation table, and hands partitions to the transport in the scheduler's order as the
/// scheduler's credit allows. An operation's partitions are queued at once, or, for a local
/// stage, one by one as it releases each (reduced on the machine).
///
/// Not thread-safe: the worker's mutex guards it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/push_pull_options.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/partition/partitioner.hpp"
#include "byteps/partition/placement.hpp"
#include "byteps/schedule/scheduler.hpp"
#include "byteps/wire/frame.hpp"
#include "byteps/worker/op_table.hpp"

namespace bps::worker {

/// The header of worker `machine`'s push of partition `part` of `t`.
inline wire::header push_frame(const tensor& t, std::uint64_t key, std::uint32_t part,
                               const pending_part& p, int machine) {
  wire::header h;
  h.type = wire::msg::push;
  h.sender = static_cast<std::uint32_t>(machine);
  h.key = key;
  h.part = part;
  h.dtype = static_cast<std::uint32_t>(t.type);
  h.round = p.round;
  h.tensor_bytes = t.bytes;
  h.offset = p.offset;
  if (p.op->trace) h.flags = wire::flag_traced;  // timeline: the server traces it too
  if (t.server_decoded) h.flags |= wire::flag_compressed;
  if (p.op->holds_no_data) h.flags |= wire::flag_no_data;
  return h;
}

/// Sends `t`'s name (and the recipe of a compressor the servers decode) to `server` over `link`
/// before its first partition there: servers learn names and compressors without a global
/// barrier, in order on the link that then carries the pushes.
template <class Link>
void declare_once(tensor& t, std::uint64_t key, int server, Link& link, int machine) {
  if (t.declared[static_cast<std::size_t>(server)]) return;
  t.declared[static_cast<std::size_t>(server)] = true;
  wire::header d;
  d.type = wire::msg::declare;
  d.sender = static_cast<std::uint32_t>(machine);
  d.key = key;
  link.send(d, t.declaration, {});  // t.declaration lives as long as the worker
}

template <Partitioner P, Scheduler S>
class dispatcher {
 public:
  explicit dispatcher(const Config& cfg)
      : partitioner_(cfg),
        placement_(cfg),
        scheduler_(make_scheduler<S>(cfg, credit_unit_of(partitioner_))) {}

  /// Tells the partitioner the job's shape from the welcome, before the first operation.
  void fit(const job_shape& shape) { fit_to_job(partitioner_, shape); }

  op_table& ops() noexcept { return ops_; }
  const op_table& ops() const noexcept { return ops_; }
  const S& scheduler() const noexcept { return scheduler_; }

  /// The server that sums partition `part` of tensor `key`.
  int server_for(std::uint64_t key, std::uint32_t part) const {
    return placement_.server_for(key, part);
  }

  /// Makes `op` its tensor's operation and queues its partitions at `opts.priority`. Returns
  /// the tensor; with no partitions (an empty tensor) nothing is queued and `op` is not made
  /// active. Throws what `op_table::begin` throws.
  tensor& enqueue(const op_ptr& op, std::string name, std::size_t count, std::size_t servers,
                  const push_pull_options& opts) {
    tensor& t = ops_.begin(op, op->key, std::move(name), count, partitioner_, servers,
                           codec_of(opts));
    op->compressed = !t.codecs.empty();
    if (t.parts.empty()) return t;
    const std::uint64_t order = order_++;
    await_tensor(op, op->key, t, 0, 0, opts.priority, order);
    for (std::uint32_t i = 0; i < t.parts.size(); ++i)
      queue(key_id{op->key, i}, *ops_.awaiting(key_id{op->key, i}));
    return t;
  }

  /// The partitions of `count` elements of `type` in `slices` slices named after `name`
  /// (`local::slice_name`), slice by slice: a local stage's plan of its tensor.
  std::vector<local::part> plan(const std::string& name, std::size_t count, dtype type,
                                int slices) const {
    std::vector<local::part> parts;
    const std::size_t esize = dtype_size(type);
    for (int s = 0; s < slices; ++s) {
      const auto [first, last] = local::slice_range(count, s, slices);
      const std::uint64_t key = tensor_key(local::slice_name(name, s));
      const auto ranges = partitioner_.split((last - first) * esize, esize);
      for (std::uint32_t i = 0; i < ranges.size(); ++i) {
        const std::size_t begin = first + ranges[i].offset / esize;
        parts.push_back({begin, begin + ranges[i].bytes / esize, s, i, key});
      }
    }
    return parts;
  }

  /// Makes `op` the operation of the slices that `owned` (a run of a local stage's plan, whose
  /// bytes lie in `op->data` from `owned.front().first`) covers, awaiting each partition; none
  /// is queued until `release`d. `first_index` is `owned.front()`'s position in the plan.
  /// Throws what `op_table::begin` throws, before anything is awaited.
  void open(const op_ptr& op, const std::string& name, std::span<const local::part> owned,
            std::size_t first_index, std::size_t servers, const push_pull_options& opts) {
    const std::size_t esize = dtype_size(op->type);
    const std::size_t base = owned.front().first;
    struct slice_run {
      tensor* t;
      std::uint64_t key;
      std::size_t from, data_offset;
    };
    std::vector<slice_run> runs;
    for (std::size_t i = 0; i < owned.size(); ++i) {
      if (i > 0 && owned[i].slice == owned[i - 1].slice) continue;
      std::size_t last = i;
      while (last + 1 < owned.size() && owned[last + 1].slice == owned[i].slice) ++last;
      const std::size_t count = owned[last].last - owned[i].first;
      tensor& t = ops_.begin(op, owned[i].key, local::slice_name(name, owned[i].slice), count,
                             partitioner_, servers, codec_of(opts));
      if (t.parts.size() != last - i + 1)
        throw usage_error(fmt::format("{}: slice {} has {} partitions, its plan {}", op->what,
                                      owned[i].slice, t.parts.size(), last - i + 1));
      runs.push_back({&t, owned[i].key, first_index + i, (owned[i].first - base) * esize});
    }
    op->compressed = !runs.front().t->codecs.empty();
    const std::uint64_t order = order_++;
    for (const auto& r : runs)
      await_tensor(op, r.key, *r.t, r.from, r.data_offset, opts.priority, order);
  }

  /// Queues partition `id` of a local stage's operation, if it is still awaited.
  void release(key_id id) {
    if (auto* p = ops_.awaiting(id); p != nullptr && !p->queued && !p->op->failure) queue(id, *p);
  }

  /// Pops what the scheduler lets go. Each partition still awaited is marked dispatched and
  /// given to `send(tensor&, key, part, pending_part&)` if `ready(server)`; the credit of the
  /// others (their operation failed, `drop` is set, or their server awaits its replacement, which
  /// re-sends them) returns at once.
  template <class Ready, class Send>
  void dispatch(bool drop, Ready&& ready, Send&& send) {
    while (auto task = scheduler_.pop()) {
      auto* p = ops_.awaiting(key_id{task->key, task->part});
      if (p == nullptr || p->op->failure || drop) {
        scheduler_.sent(task->bytes);
        continue;
      }
      p->dispatched = true;
      if (!ready(p->server)) {
        scheduler_.sent(task->bytes);
        continue;
      }
      tensor& t = ops_.at(task->key);
      p->dispatched_at = op_table::clock::now();
      t.timing.stages.add(stage::queue, stats_recorder::seconds(p->dispatched_at - p->queued_at));
      send(t, task->key, task->part, *p);
    }
  }

  /// What partition `part` pushes: the caller's bytes, or with a compressor their encoding
  /// (made now if `encode`, else the one made at dispatch, for a re-push). A compressor the
  /// servers decode gets the partition's raw size first (wire::flag_compressed), and the
  /// learning rate if it changed since its last encode.
  std::span<const std::byte> push_payload(tensor& t, std::uint32_t part, const pending_part& p,
                                          bool encode) {
    auto raw = p.op->data.subspan(p.data_offset, p.bytes);
    if (!p.op->compressed) return raw;
    auto& out = t.encoded[part];
    if (encode) {
      auto& codec = *t.codecs[part];
      if (t.rate_seen[part] != rate_version_) {
        codec.set_learning_rate(rate_);
        t.rate_seen[part] = rate_version_;
      }
      const std::size_t at = t.server_decoded ? wire::compressed_prefix_bytes : 0;
      const auto began = op_table::clock::now();
      out.resize(at + codec.max_encoded_bytes(p.bytes, t.type));
      if (t.server_decoded) wire::detail::put_le<std::uint64_t>(out.data(), p.bytes);
      out.resize(at + codec.encode(raw, t.type, std::span(out).subspan(at)));
      t.timing.stages.add(stage::encode,
                          stats_recorder::seconds(op_table::clock::now() - began));
    }
    return out;
  }

  /// `Communicator::set_learning_rate`: every compressor gets `lr` before its next encode (so
  /// never while an I/O thread decodes with it). Call it under the worker's mutex.
  void set_learning_rate(double lr) {
    rate_ = lr;
    ++rate_version_;
  }

  /// A dispatched partition's payload left (or was dropped): its credit returns.
  void sent(std::size_t bytes) { scheduler_.sent(bytes); }

 private:
  // The node resolved the compressor (Config's default, the size threshold); none() is null.
  static const compress::spec* codec_of(const push_pull_options& opts) {
    const compress::spec* codec = opts.compressor.get();
    return codec != nullptr && codec->is_none() ? nullptr : codec;
  }

  // `op` runs on tensor `key` (`t`): each of its partitions awaited, the first at position
  // `first_index` of the operation's and at `data_offset` in `op->data`.
  void await_tensor(const op_ptr& op, std::uint64_t key, tensor& t, std::size_t first_index,
                    std::size_t data_offset, int priority, std::uint64_t order) {
    ops_.activate(op, key, t);
    op->unanswered += t.parts.size();
    for (std::uint32_t i = 0; i < t.parts.size(); ++i) {
      const auto& range = t.parts[i];
      pending_part p{op, range.offset, range.bytes, server_for(key, i), t.round};
      p.data_offset = data_offset + range.offset;
      p.index = first_index + i;
      p.priority = priority;
      p.order = order;
      ops_.await(key_id{key, i}, std::move(p));
    }
  }

  void queue(key_id id, pending_part& p) {
    p.queued = true;
    p.queued_at = op_table::clock::now();
    scheduler_.push(send_task{id.key, id.part, p.priority, p.order, p.bytes, nullptr});
  }

  P partitioner_;
  server_placement placement_;
  S scheduler_;
  op_table ops_;
  std::uint64_t order_ = 0;  // push_pull calls so far: earlier calls go first among equals
  double rate_ = 0;                // the learning rate last set
  std::uint64_t rate_version_ = 0;  // 0: never set; tensors' compressors have seen 0
};

}  // namespace bps::worker
