#pragma once
/// @file
/// Batches (tensor fusion, issue 12): many small frames of one kind in one frame, so that a
/// backward pass's hundred tiny gradients cost the peer one frame, not a hundred. A
/// `push_batch` carries `push` records (worker -> server), an `answer_batch` `pull_response`
/// records (server -> worker). The batch's header names the record count in `part`; its payload
/// is the records back to back, each a complete 64-byte encoded header (frame.hpp) followed by
/// exactly its `payload_bytes`:
///
///   [header 0][payload 0][header 1][payload 1] ... [header n-1][payload n-1]
///
/// Records are whole frames on purpose: the receiver hands each one down the path its own frame
/// takes, with the same checks, so fusion changes how bytes travel and nothing of what they
/// mean. A batch's payload is at most `max_batch_bytes`.

#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "byteps/core/linkage.hpp"
#include "byteps/wire/codec.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::wire {

/// The largest batch payload, record headers included. Well under the smallest frame limit a
/// node has (`Config::max_frame_bytes()`, a partition plus 1 MiB), and small enough that
/// copying its members costs less than the frames it saves.
inline constexpr std::size_t max_batch_bytes = std::size_t{1} << 20;

/// The type of the records a batch of type `batch` carries; `batch` itself for other types.
constexpr msg record_type(msg batch) noexcept {
  if (batch == msg::push_batch) return msg::push;
  if (batch == msg::answer_batch) return msg::pull_response;
  return batch;
}

/// Writes one batch. Not thread-safe.
class batch_writer {
 public:
  /// Bytes a record with a payload of `payload_bytes` takes in a batch.
  static constexpr std::size_t record_bytes(std::size_t payload_bytes) noexcept {
    return header_size + payload_bytes;
  }

  /// Whether a record of `payload_bytes` still fits under `max_batch_bytes`.
  bool fits(std::size_t payload_bytes) const noexcept {
    return bytes_.size() + record_bytes(payload_bytes) <= max_batch_bytes;
  }

  /// Appends `h` (its `payload_bytes` set to the payload's size) and a copy of `payload`.
  void add(header h, std::span<const std::byte> payload) {
    h.payload_bytes = payload.size();
    const std::size_t at = bytes_.size();
    bytes_.resize(at + record_bytes(payload.size()));
    encode(h, std::span<std::byte, header_size>(bytes_.data() + at, header_size));
    if (!payload.empty())
      std::memcpy(bytes_.data() + at + header_size, payload.data(), payload.size());
    ++records_;
  }

  std::size_t records() const noexcept { return records_; }
  std::size_t bytes() const noexcept { return bytes_.size(); }

  /// The batch frame's header: `type` (push_batch or answer_batch) from `sender`, its record
  /// count in `part`. The transport fills in `payload_bytes` when it sends.
  header frame(msg type, std::uint32_t sender) const noexcept {
    header h;
    h.type = type;
    h.sender = sender;
    h.part = static_cast<std::uint32_t>(records_);
    h.payload_bytes = bytes_.size();
    return h;
  }

  /// The payload; moved out, the writer is empty again.
  std::vector<std::byte> take() noexcept {
    records_ = 0;
    return std::move(bytes_);
  }

 private:
  std::vector<std::byte> bytes_;
  std::size_t records_ = 0;
};

/// One record of a split batch: its header and its payload, a view into the batch.
struct batch_record {
  header head;
  std::span<const std::byte> payload;
};

/// Splits the payload of the batch frame `batch` into its records. Every record header is
/// validated as a frame header is (magic, version, type) and must be of the batch's record type;
/// the header's record count must be at least 1 and the records must fill the payload exactly.
/// Anything else throws `decode_error` naming the record and what is wrong with it.
BYTEPS_DECL std::vector<batch_record> split_batch(const header& batch,
                                                  std::span<const std::byte> payload);

}  // namespace bps::wire

#if BYTEPS_INCLUDE_BODIES
#include "byteps/wire/impl/batch.hpp"
#endif
