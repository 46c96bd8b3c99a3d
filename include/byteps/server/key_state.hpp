#pragma once
/// @file
/// The server's state for one partition key: its shape (fixed by the first push ever), the
/// round being summed, who pushed, and the two sum buffers. Owned and touched by one engine
/// thread only.

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

/// `part` value of an error that concerns a whole tensor rather than one partition.
inline constexpr std::uint32_t whole_tensor = 0xffffffffu;

struct key_id {
  std::uint64_t key = 0;
  std::uint32_t part = 0;
  friend bool operator==(const key_id&, const key_id&) = default;
};

struct key_id_hash {
  std::size_t operator()(const key_id& k) const noexcept {
    return static_cast<std::size_t>(partition_key(k.key, k.part) * 0xff51afd7ed558ccdull >> 7);
  }
};

/// `Waiter` is the server's per-worker link session; the sum goes back to each waiter.
template <class Waiter>
class key_state {
 public:
  /// Takes worker `worker`'s push for the current round. Returns what was wrong with it (the
  /// message for that worker alone), or "" when accepted. A push whose shape differs from the
  /// key's is accepted but poisons the round: everyone who pushed gets `round_error`.
  ///
  /// `received` holds the pushed bytes. The round's first push of a dtype summed in itself is
  /// not copied: its buffer becomes the round's sum buffer, and `received` gets the buffer it
  /// replaced (empty at first), for the caller to recycle.
  template <class NameFn>
  std::string accept(const wire::header& h, detail::buffer_pool::buffer& received, int worker,
                     int num_workers, NameFn&& tensor_name) {
    const std::span<const std::byte> payload = received.span();
    auto t = dtype_from_wire(h.dtype);
    if (!t) return fmt::format("unknown dtype value {} for {}", h.dtype, tensor_name());
    const std::size_t size = dtype_size(*t);
    if (payload.size() % size != 0)
      return fmt::format("a partition of {} has {} bytes, not a whole number of {} elements",
                         tensor_name(), payload.size(), dtype_name(*t));
    if (worker < 0 || worker >= num_workers)
      return fmt::format("push from unknown worker {}", worker);
    if (h.round != round)
      return fmt::format("worker {} pushed round {} of {} partition {}, but the server is at "
                         "round {}; was a push_pull skipped on one worker?",
                         worker, h.round, tensor_name(), h.part, round);
    if (!initialized_) {
      initialized_ = true;
      type = *t;
      tensor_bytes = h.tensor_bytes;
      offset = h.offset;
      bytes = payload.size();
      first_worker_ = worker;
      pushed_by_.assign(static_cast<std::size_t>(num_workers), false);
      if (type == dtype::float16 || type == dtype::bfloat16) {
        wide_.assign(reduce::accumulator_bytes(type, bytes / size), std::byte{0});
        for (auto& o : out_) o = {std::make_unique_for_overwrite<std::byte[]>(bytes), bytes};
      }
    } else if (*t != type || h.tensor_bytes != tensor_bytes || h.offset != offset ||
               payload.size() != bytes) {
      if (round_error.empty()) {
        round_error = fmt::format(
            "tensor {} has different shapes on different workers: worker {} pushed {} x {}, "
            "worker {} pushed {} x {}; every worker must push_pull the same number of elements "
            "and dtype under one name",
            tensor_name(), first_worker_, tensor_bytes / dtype_size(type), dtype_name(type),
            worker, h.tensor_bytes / size, dtype_name(*t));
      }
    }
    auto w = static_cast<std::size_t>(worker);
    if (pushed_by_[w])
      return fmt::format("worker {} pushed {} partition {} twice in round {}", worker,
                         tensor_name(), h.part, round);
    pushed_by_[w] = true;
    if (waiting.empty()) round_started = std::chrono::steady_clock::now();
    if (round_error.empty()) {
      const std::size_t count = bytes / dtype_size(type);
      if (!wide_.empty()) {
        if (waiting.empty()) reduce::accumulate_init(wide_.data(), payload.data(), count, type);
        else reduce::accumulate_add(wide_.data(), payload.data(), count, type);
      } else if (waiting.empty()) {
        std::swap(out_[round % 2], received);  // the first contribution is the sum so far
      } else {
        reduce::accumulate_add(out_[round % 2].data.get(), payload.data(), count, type);
      }
    }
    return {};
  }

  /// The round's sum, in the tensor's dtype; valid until round + 2 begins.
  std::span<const std::byte> finish_round() {
    auto& out = out_[round % 2];
    if (!wide_.empty())
      reduce::accumulate_finish(out.data.get(), wide_.data(), bytes / dtype_size(type), type);
    return out.span();
  }

  /// Workers that have not pushed the current round yet (for the stall report).
  std::vector<int> missing() const {
    std::vector<int> m;
    for (std::size_t w = 0; w < pushed_by_.size(); ++w)
      if (!pushed_by_[w]) m.push_back(static_cast<int>(w));
    return m;
  }

  void next_round() {
    stall_reported = false;
    waiting.clear();
    std::fill(pushed_by_.begin(), pushed_by_.end(), false);
    round_error.clear();
    ++round;
  }

  dtype type = dtype::float32;
  std::uint64_t tensor_bytes = 0;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint64_t round = 0;
  std::string round_error;
  std::vector<std::shared_ptr<Waiter>> waiting;  // pushed this round, in arrival order
  std::chrono::steady_clock::time_point round_started;  // first push of the current round
  bool stall_reported = false;

 private:
  bool initialized_ = false;
  int first_worker_ = -1;
  std::vector<bool> pushed_by_;
  detail::buffer_pool::buffer out_[2];  // the sums of even and odd rounds
  std::vector<std::byte> wide_;  // fp32 accumulator for fp16 and bf16
};

}  // namespace bps::server
