#pragma once
/// @file
/// A server's side of tensor fusion (wire/batch.hpp, BYTEPS_FUSION_BYTES). A worker's
/// `push_batch` is split, and each record goes down exactly the path its own `push` frame
/// would take: the session is asked where its payload goes and is then handed the frame, so a
/// record meets every check a push meets (the sender's rank, a refused key, the handler's shape
/// and round checks) and is summed the same way. The answers that become ready while one batch
/// is handled, on the thread that handles it, gather per worker in `answer_batches` and go back
/// as one `answer_batch` per worker (a lone answer as a plain `pull_response`). A batch changes
/// how the bytes travel, never what they mean: a worker that does not fuse is answered the same.
///
/// No state outlives a batch: `take_push_batch` owns its `answer_batches` and lends it to the
/// session (`Session::batching`) while the records are handled; `Server::post_push` passes it on
/// to the answers of the pushes summed there and then (not to those posted to an engine thread,
/// which answer later, alone).

#include <fmt/core.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/server/handler.hpp"
#include "byteps/wire/batch.hpp"
#include "byteps/wire/codec.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

/// The header of the `pull_response` that answers `about`'s partition with `a`; `flags` adds
/// the piece flags of cut-through.
inline wire::header pull_response_header(const wire::header& about, const reply& a,
                                         std::uint32_t flags) {
  wire::header r;
  r.type = wire::msg::pull_response;
  r.flags = flags | (a.compressed ? wire::flag_compressed : 0u) |
            (a.applied_counts ? wire::flag_applied : 0u);
  r.key = about.key;
  r.part = about.part;
  r.round = a.round;
  r.dtype = static_cast<std::uint32_t>(a.type);
  r.offset = a.offset;
  r.tensor_bytes = a.tensor_bytes;
  r.sender = a.contributors;
  return r;
}

/// Whether a `push_batch` of `h.payload_bytes` may be read; `reason` says why not.
inline bool batch_fits(const wire::header& h, std::string& reason) {
  if (h.payload_bytes <= wire::max_batch_bytes) return true;
  reason =
      fmt::format("a push_batch of {} bytes (at most {})", h.payload_bytes, wire::max_batch_bytes);
  return false;
}

/// The answers gathered while one push_batch is handled, by worker session. Each answer is
/// copied in when it is added (they are small), so the handler's sum buffer is free at once.
/// Used by one thread, the batch's I/O thread.
template <class Session>
class answer_batches {
 public:
  /// `fusion_bytes`: the largest answer that joins (BYTEPS_FUSION_BYTES; 0: none does).
  explicit answer_batches(std::size_t fusion_bytes) : fusion_bytes_(fusion_bytes) {}
  answer_batches(const answer_batches&) = delete;
  answer_batches& operator=(const answer_batches&) = delete;

  /// Takes the answer `a` about `about`'s partition for `to`, to be sent by `flush`. False,
  /// taking nothing, for an answer larger than the threshold: the caller sends it alone.
  bool add(const std::shared_ptr<Session>& to, const wire::header& about, const reply& a) {
    if (fusion_bytes_ == 0 || a.bytes.size() > fusion_bytes_) return false;
    auto* g = group_of(to);
    if (!g->writer.fits(a.bytes.size())) send(*g);
    if (g->writer.records() == 0) g->first = pull_response_header(about, a, 0);
    g->writer.add(pull_response_header(about, a, 0), a.bytes);
    return true;
  }

  /// Sends what was gathered: one answer_batch per worker, or a pull_response for a lone one.
  void flush() {
    for (auto& g : groups_) send(g);
    groups_.clear();
  }

 private:
  struct group {
    std::shared_ptr<Session> to;
    wire::batch_writer writer;
    wire::header first;  // the first record's header: a lone answer goes as it
  };

  group* group_of(const std::shared_ptr<Session>& to) {
    for (auto& g : groups_)  // a handful of workers: a scan beats a map
      if (g.to == to) return &g;
    groups_.push_back(group{to, {}, {}});
    return &groups_.back();
  }

  static void send(group& g) {
    const std::size_t n = g.writer.records();
    if (n == 0) return;
    auto h = g.writer.frame(wire::msg::answer_batch, 0);
    auto bytes = std::make_shared<std::vector<std::byte>>(g.writer.take());
    std::span<const std::byte> payload(*bytes);
    if (n == 1) {
      h = g.first;
      payload = payload.subspan(wire::header_size);
    }
    g.to->link->send(h, payload, [bytes] {});
  }

  std::size_t fusion_bytes_;
  std::vector<group> groups_;
};

/// Handles worker session `s`'s `push_batch` `h` with `payload`: each record as the push frame
/// it is (`s.payload_destination`, then `s.on_message`), in order; then the answers that became
/// ready meanwhile go back (`answer_batches`), also when a record was refused. Throws
/// `wire::decode_error` for a malformed batch (wire::split_batch) or a record the session
/// refuses to read, naming the record: the link then closes, as for a refused push frame.
template <class Session>
void take_push_batch(Session& s, const wire::header& h, std::span<const std::byte> payload,
                     std::size_t fusion_bytes) {
  const auto records = wire::split_batch(h, payload);  // all checked before any is summed
  answer_batches<Session> answers(fusion_bytes);
  s.batching = &answers;
  try {
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      std::string reason;
      auto dest = s.payload_destination(r.head, reason);
      if (dest.size() != r.payload.size())
        throw wire::decode_error(fmt::format("push_batch record {} of {} refused: {}", i,
                                             records.size(),
                                             reason.empty() ? "no place for its payload" : reason));
      if (!dest.empty()) std::memcpy(dest.data(), r.payload.data(), dest.size());
      s.on_message(r.head, dest);
    }
  } catch (...) {
    s.batching = nullptr;
    answers.flush();  // sums made before the refusal still answer the workers that wait
    throw;
  }
  s.batching = nullptr;
  answers.flush();
}

}  // namespace bps::server
