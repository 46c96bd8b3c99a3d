#pragma once
/// @file
/// `bps::worker::server_receiver<Owner>`: reads one server link for a worker. An answer is read
/// straight into the place its owner names (the caller's buffer, or failover's kept sum), and
/// each answer of an `answer_batch` (tensor fusion) the same way; an error frame and the link's
/// close go to the owner, tagged with the server's rank and the link's generation so that
/// reports from a replaced link are recognised. A table call's answer is read into a buffer of
/// the receiver's and handed over whole. The owner provides `answer_destination`, `answered`,
/// `answer_batch`, `rows_answered`, `server_error` and `server_closed` (worker/answers.hpp), all
/// called on the link's I/O thread.

#include <fmt/core.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "byteps/core/keys.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/batch.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::worker {

using op_ptr = std::shared_ptr<detail::op_state>;

template <class Owner>
class server_receiver final : public transport::receiver, public transport::cached_destinations {
 public:
  server_receiver(Owner* owner, int server, std::uint64_t generation)
      : owner_(owner), server_(server), generation_(generation) {}

  // RDMA may cache where an answer lands (memory the trainer registered).
  transport::receiver_capabilities capabilities() override { return {.cached = this}; }

  std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
    if (h.type == wire::msg::pull_response) {
      receiving_id_ = key_id{h.key, h.part};
      if (auto dest = owner_->answer_destination(h, receiving_); !dest.empty()) return dest;
      discard_.resize(h.payload_bytes);  // an answer for an operation that already failed
      return discard_;
    }
    if (h.type == wire::msg::answer_batch) {
      if (h.payload_bytes > wire::max_batch_bytes) {
        reason = fmt::format("an answer_batch of {} bytes (at most {})", h.payload_bytes,
                             wire::max_batch_bytes);
        return {};
      }
      batch_.resize(h.payload_bytes);
      return batch_;
    }
    if (h.type == wire::msg::rows_answer) {  // a table call's (worker/row_calls.hpp)
      rows_.resize(h.payload_bytes);
      return rows_;
    }
    if (h.type == wire::msg::error && h.payload_bytes <= 65536) {
      discard_.resize(h.payload_bytes);
      return discard_;
    }
    reason = fmt::format("unexpected {} frame from a server", wire::msg_name(h.type));
    return {};
  }

  // An answer written into registered memory: the same tensor's later answers land there too.
  bool destination_stays(const wire::header& h, std::span<const std::byte> dest) override {
    return h.type == wire::msg::pull_response && receiving_ && owner_->answer_stays(dest);
  }

  void on_message(const wire::header& h, std::span<std::byte> payload) override {
    if (h.type == wire::msg::pull_response) {
      if (receiving_) {
        op_ptr op = std::move(receiving_);
        owner_->answered(h, op, payload);
      }
      return;
    }
    if (h.type == wire::msg::answer_batch) return answer_batch(h, payload);
    if (h.type == wire::msg::rows_answer)
      return owner_->rows_answered(server_, generation_, h, payload);
    if (h.type == wire::msg::redo) return owner_->redo(server_, generation_, h);
    owner_->server_error(
        server_, generation_, h,
        std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
  }

  void on_close(const std::string& reason) override {
    op_ptr op = std::move(receiving_);
    owner_->server_closed(server_, generation_, op, receiving_id_, reason);
  }

 private:
  // Tensor fusion (wire/batch.hpp): each record of an answer_batch goes the way its own
  // pull_response frame would, into the place its owner names, so it is checked and written
  // exactly as one. A malformed batch throws wire::decode_error: the link closes.
  void answer_batch(const wire::header& h, std::span<const std::byte> payload) {
    const auto records = wire::split_batch(h, payload);
    owner_->answer_batch(records.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      std::string reason;
      auto dest = payload_destination(r.head, reason);
      if (dest.size() != r.payload.size())
        throw wire::decode_error(
            fmt::format("answer_batch record {} of {} refused: {}", i, records.size(), reason));
      if (!dest.empty()) std::memcpy(dest.data(), r.payload.data(), dest.size());
      on_message(r.head, dest);
    }
  }

  Owner* owner_;
  int server_;
  std::uint64_t generation_;
  op_ptr receiving_;  // I/O thread only: the operation the answer in progress is written into
  key_id receiving_id_;
  std::vector<std::byte> discard_;
  std::vector<std::byte> batch_;  // I/O thread only: an answer_batch being read
  std::vector<std::byte> rows_;   // I/O thread only: a rows_answer being read
};

}  // namespace bps::worker
