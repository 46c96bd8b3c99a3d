#pragma once
/// @file
/// `bps::worker::push_fusion`: a worker's side of tensor fusion (wire/batch.hpp,
/// BYTEPS_FUSION_BYTES). Within one dispatch pass (the partitions the scheduler lets go at
/// once), the small uncompressed partitions bound for one server are held, and at the end of
/// the pass go as one `push_batch` (two or more) or as their plain `push` (a lone one). Nothing
/// waits for a timer: a partition dispatched on an idle link goes at once, alone; partitions
/// fuse only when they were let go together, such as those queued behind the scheduler's credit
/// that a returning credit releases in one pass. Unlike Horovod's fusion, workers need not agree
/// on groupings: a server handles each record as the push it is.
///
/// Not thread-safe: the worker's mutex guards it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/wire/batch.hpp"
#include "byteps/wire/frame.hpp"
#include "byteps/worker/op_table.hpp"

namespace bps::worker {

static_assert(wire::batch_writer::record_bytes(Config::max_fusion_bytes) * 3 <=
                  wire::max_batch_bytes,
              "a batch holds at least three members of the largest size that fuses");

/// A partition sent in a batch: what its sent path needs once the batch has left.
struct batch_member {
  op_ptr op;
  std::size_t bytes = 0;  ///< its scheduler credit
  key_id id;              ///< the partition on the wire
  std::size_t index = 0;  ///< its position among the operation's partitions
};

/// A push held for the end of the pass: its frame, its payload (the caller's bytes, alive until
/// its sent path ran) and its member record.
struct held_push {
  wire::header head;
  std::span<const std::byte> payload;
  batch_member member;
};

/// A `push_batch` on its way: the bytes its send reads, and its members.
struct fused_pushes {
  wire::header head;
  std::vector<std::byte> bytes;
  std::vector<batch_member> members;
};

class push_fusion {
 public:
  /// `registers_memory`: the transport writes pushes straight into the server's registered
  /// memory (RDMA), which a batch would trade for two copies: fusion is off there.
  push_fusion(const Config& cfg, bool registers_memory)
      : threshold_(registers_memory ? 0 : cfg.fusion_bytes) {}

  /// Whether a partition of `t` with a payload of `bytes` joins a batch: fusion on, the tensor
  /// uncompressed (its payload is the caller's bytes) and in one partition (a small tensor, as
  /// Horovod fuses whole tensors), the partition at most the threshold. A tensor the partitioner
  /// spread over the servers keeps its partitions apart, each summed and answered as it comes:
  /// fused, a server sums its frame only once the whole of it is in from every worker
  /// (docs/performance.md, "Tensor fusion", has the cost).
  bool joins(const tensor& t, std::size_t bytes) const noexcept {
    return threshold_ != 0 && t.codecs.empty() && t.parts.size() == 1 && bytes <= threshold_;
  }

  /// Holds `p` for `server`. When it would not fit in that server's batch, what is held goes
  /// first, through `send(server, group)`.
  template <class Send>
  void hold(int server, held_push p, Send&& send) {
    auto& g = group(server);
    if (!g.pushes.empty() &&
        g.bytes + wire::batch_writer::record_bytes(p.payload.size()) > wire::max_batch_bytes)
      flush(server, send);
    g.bytes += wire::batch_writer::record_bytes(p.payload.size());
    g.pushes.push_back(std::move(p));
  }

  /// Sends what is held for `server` through `send(server, std::vector<held_push>&&)`: before a
  /// push that does not fuse, so that the link keeps the scheduler's order.
  template <class Send>
  void flush(int server, Send&& send) {
    if (static_cast<std::size_t>(server) >= groups_.size()) return;
    auto& g = groups_[static_cast<std::size_t>(server)];
    if (g.pushes.empty()) return;
    auto pushes = std::move(g.pushes);
    g.pushes.clear();
    g.bytes = 0;
    send(server, std::move(pushes));
  }

  /// The end of a pass: what is held for every server goes.
  template <class Send>
  void flush_all(Send&& send) {
    for (std::size_t s = 0; s < groups_.size(); ++s) flush(static_cast<int>(s), send);
  }

  /// Two or more held pushes as one batch from worker `machine`, their payloads copied in.
  BYTEPS_DECL static std::shared_ptr<fused_pushes> fuse(const std::vector<held_push>& pushes,
                                                        int machine);

 private:
  struct server_group {
    std::vector<held_push> pushes;
    std::size_t bytes = 0;  // their records' bytes in a batch
  };

  server_group& group(int server) {
    const auto s = static_cast<std::size_t>(server);
    if (s >= groups_.size()) groups_.resize(s + 1);
    return groups_[s];
  }

  std::size_t threshold_;
  std::vector<server_group> groups_;
};

}  // namespace bps::worker

#if BYTEPS_INCLUDE_BODIES
#include "byteps/worker/impl/fusion.hpp"
#endif
