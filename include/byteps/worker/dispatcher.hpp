#pragma once
/// @file
/// `bps::worker::dispatcher<Partitioner, Scheduler>`: what a worker sends next. It cuts each
/// operation's tensor into partitions, places each on its server, records what is awaited in the
/// operation table, and hands partitions to the transport in the scheduler's order as the
/// scheduler's credit allows.
///
/// Not thread-safe: the worker's mutex guards it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "byteps/core/config.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/push_pull_options.hpp"
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
    // The node resolved the compressor (Config's default, the size threshold); none() is null.
    const compress::spec* codec = opts.compressor.get();
    if (codec != nullptr && codec->is_none()) codec = nullptr;
    tensor& t = ops_.begin(op, std::move(name), count, partitioner_, servers, codec);
    op->compressed = !t.codecs.empty();
    if (t.parts.empty()) return t;
    t.active = op;
    t.timing = op_timing{};
    t.timing.started = op_table::clock::now();
    op->unanswered = t.parts.size();
    const std::uint64_t order = order_++;
    for (std::uint32_t i = 0; i < t.parts.size(); ++i) {
      const auto& range = t.parts[i];
      const int server = server_for(op->key, i);
      ops_.await(key_id{op->key, i}, pending_part{op, range.offset, range.bytes, server, t.round});
      scheduler_.push(send_task{op->key, i, opts.priority, order, range.bytes, nullptr});
    }
    return t;
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
      t.timing.queued += stats_recorder::seconds(p->dispatched_at - t.timing.started);
      send(t, task->key, task->part, *p);
    }
  }

  /// What partition `part` pushes: the caller's bytes, or with a compressor their encoding
  /// (made now if `encode`, else the one made at dispatch, for a re-push). A compressor the
  /// servers decode gets the partition's raw size first (wire::flag_compressed), and the
  /// learning rate if it changed since its last encode.
  std::span<const std::byte> push_payload(tensor& t, std::uint32_t part, const pending_part& p,
                                          bool encode) {
    auto raw = p.op->data.subspan(p.offset, p.bytes);
    if (!p.op->compressed) return raw;
    auto& out = t.encoded[part];
    if (encode) {
      auto& codec = *t.codecs[part];
      if (t.rate_seen[part] != rate_version_) {
        codec.set_learning_rate(rate_);
        t.rate_seen[part] = rate_version_;
      }
      const std::size_t at = t.server_decoded ? wire::compressed_prefix_bytes : 0;
      out.resize(at + codec.max_encoded_bytes(p.bytes, t.type));
      if (t.server_decoded) wire::detail::put_le<std::uint64_t>(out.data(), p.bytes);
      out.resize(at + codec.encode(raw, t.type, std::span(out).subspan(at)));
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
  P partitioner_;
  server_placement placement_;
  S scheduler_;
  op_table ops_;
  std::uint64_t order_ = 0;  // push_pull calls so far: earlier calls go first among equals
  double rate_ = 0;                // the learning rate last set
  std::uint64_t rate_version_ = 0;  // 0: never set; tensors' compressors have seen 0
};

}  // namespace bps::worker
