#pragma once
/// @file
/// `server::async_sum`: the `ServerHandler` of asynchronous training (`BYTEPS_ENABLE_ASYNC=1`).
/// The server holds each partition's parameters; a worker pushes a delta and is answered at once
/// with the parameters as they are after it, without waiting for the other workers.
///
/// Per partition key:
/// - **Seed (round 0).** A worker's first push of a tensor is round 0. Rank 0's round-0 push
///   becomes the parameters as they are (not added to zeros): every worker starts from rank 0's
///   initial values. Another worker's round-0 push waits until rank 0's has come, and gets the
///   seeded parameters; its bytes are not used. After the seed, a round-0 push is answered at
///   once with the current parameters.
/// - **Deltas (round r >= 1).** Worker w's push of round r is added into the parameters (integers
///   wrap; fp16 and bf16 are kept in an fp32 master copy, so rounding happens once per answer and
///   does not accumulate), the key's version (deltas applied) goes up by one, and w is answered
///   with a copy of the parameters (`reply::keep`: other pushes change them while it is sent).
///   A worker's rounds must come in order (0, 1, 2, ...), as `push_pull` sends them.
/// - **Bounded staleness** (`Config::async_staleness` = s >= 0). `pushes(w)` counts the deltas
///   of w applied. A push that leaves w more than s deltas ahead of the slowest worker (one that
///   has not pushed counts 0) is applied but not answered: w is held in the key's waiting list,
///   so it cannot push again. Each push that raises the slowest count answers, each with its
///   own round (`outcome::release_each`), the held workers no longer more than s ahead. So a
///   worker's completed push_pulls are never more than s ahead of any worker's pushes, and a
///   straggler holds back only the workers that ran s ahead of it. A held worker waits within
///   its operation's deadline (`BYTEPS_OP_TIMEOUT_MS`), and the server's stall report names the
///   workers its room waits for. s = -1 (the default, as in BytePS): nobody is ever held.
///
/// Failover (a replacement server recovering the parameters) is not supported in async mode:
/// `Config::validate` refuses async with failover on.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

class async_sum {
 public:
  /// @throws usage_error when `cfg` is not in async mode: workers would get parameters where
  /// they expect sums.
  async_sum(const Config& cfg, detail::buffer_pool&) : staleness_(cfg.async_staleness) {
    if (!cfg.enable_async)
      throw usage_error("server::async_sum needs BYTEPS_ENABLE_ASYNC=1 on every node: without "
                        "it workers expect sums, not parameters");
  }

  outcome handle(const request& r) {
    const wire::header& h = r.head;
    if (h.type != wire::msg::push)
      return outcome::refuse(fmt::format("async mode takes pushes only, not a {} of {}",
                                         wire::msg_name(h.type), r.tensor_name()));
    auto& k = keys_[key_id{h.key, h.part}];
    if (auto bad = check(k, h, r); !bad.empty()) return outcome::refuse(std::move(bad));
    const auto w = static_cast<std::size_t>(r.worker);
    if (!k.seeded) {
      if (r.worker != 0) {  // waits for the seed (check() let no later round through)
        k.started[w] = true;
        return outcome::wait();
      }
      k.started[w] = true;
      k.seeded = true;
      reduce::accumulate_init(k.master.data(), r.payload.data.get(), k.count(), k.type);
      return outcome::release(snapshot(k, 0));  // rank 0 and everyone who waited for the seed
    }
    if (h.round == 0) {
      k.started[w] = true;
      return outcome::answer_now(snapshot(k, 0));
    }
    const std::uint64_t slowest_before = k.slowest();
    reduce::accumulate_add(k.master.data(), r.payload.data.get(), k.count(), k.type);
    ++k.version;
    k.pushes[w] = h.round;
    if (staleness_ >= 0 && k.pushes[w] - k.slowest() > static_cast<std::uint64_t>(staleness_)) {
      k.held[w] = h.round;
      return outcome::wait();
    }
    reply now = snapshot(k, h.round);
    const std::uint64_t slowest = k.slowest();
    if (staleness_ < 0 || slowest == slowest_before) return outcome::answer_now(std::move(now));
    std::vector<held_answer> released;
    for (std::size_t u = 0; u < k.held.size(); ++u) {
      if (k.held[u] == 0 || k.pushes[u] - slowest > static_cast<std::uint64_t>(staleness_))
        continue;
      reply mine = now;  // the same bytes, its own round
      mine.round = k.held[u];
      released.push_back({static_cast<int>(u), std::move(mine)});
      k.held[u] = 0;
    }
    if (released.empty()) return outcome::answer_now(std::move(now));
    return outcome::release_each(std::move(now), std::move(released));
  }

  /// Deltas applied to partition `part` of tensor `key` (0 before and at the seed); nullopt for
  /// a partition never pushed. For tests and tools.
  std::optional<std::uint64_t> version(std::uint64_t key, std::uint32_t part) const {
    auto it = keys_.find(key_id{key, part});
    if (it == keys_.end() || !it->second.shaped) return std::nullopt;
    return it->second.version;
  }

 private:
  struct key {
    bool shaped = false;  // the first push (of any worker) fixed dtype and size
    bool seeded = false;  // rank 0's round 0 came: `master` holds the parameters
    dtype type = dtype::float32;
    std::uint64_t tensor_bytes = 0, offset = 0, bytes = 0;
    int first_worker = -1;
    std::vector<std::byte> master;  // the parameters; fp32 for fp16 and bf16
    std::uint64_t version = 0;      // deltas applied
    std::vector<bool> started;           // by worker: its round 0 came
    std::vector<std::uint64_t> pushes;   // by worker: deltas applied (= its last round)
    std::vector<std::uint64_t> held;     // by worker: the round its answer is held for (0: none)

    std::size_t count() const noexcept { return bytes / dtype_size(type); }
    std::uint64_t slowest() const noexcept { return *std::min_element(pushes.begin(), pushes.end()); }
  };

  // What is wrong with this push, for its worker alone; "" when it may be taken. The first push
  // ever fixes the key's shape, as in synchronous mode.
  static std::string check(key& k, const wire::header& h, const request& r) {
    const auto t = dtype_from_wire(h.dtype);
    const std::size_t size = r.payload.size;
    if (!t) return fmt::format("unknown dtype value {} for {}", h.dtype, r.tensor_name());
    if (size % dtype_size(*t) != 0)
      return fmt::format("a partition of {} has {} bytes, not a whole number of {} elements",
                         r.tensor_name(), size, dtype_name(*t));
    if (r.worker < 0 || r.worker >= r.num_workers)
      return fmt::format("push from unknown worker {}", r.worker);
    if (!k.shaped) {
      k.shaped = true;
      k.type = *t;
      k.tensor_bytes = h.tensor_bytes;
      k.offset = h.offset;
      k.bytes = size;
      k.first_worker = r.worker;
      k.master.assign(reduce::accumulator_bytes(k.type, k.count()), std::byte{0});
      const auto n = static_cast<std::size_t>(r.num_workers);
      k.started.assign(n, false);
      k.pushes.assign(n, 0);
      k.held.assign(n, 0);
    } else if (*t != k.type || h.tensor_bytes != k.tensor_bytes || h.offset != k.offset ||
               size != k.bytes) {
      return fmt::format(
          "tensor {} has different shapes on different workers: worker {} pushed {} x {}, "
          "worker {} pushed {} x {}; every worker must push_pull the same number of elements "
          "and dtype under one name",
          r.tensor_name(), k.first_worker, k.tensor_bytes / dtype_size(k.type),
          dtype_name(k.type), r.worker, h.tensor_bytes / dtype_size(*t), dtype_name(*t));
    }
    const auto w = static_cast<std::size_t>(r.worker);
    const std::uint64_t expected = k.started[w] ? k.pushes[w] + 1 : 0;
    if (h.round != expected)
      return fmt::format("worker {} pushed round {} of {} partition {}, but its next round is {}; "
                         "in async mode each worker's push_pulls of a tensor count 0, 1, 2, ...",
                         r.worker, h.round, r.tensor_name(), h.part, expected);
    return {};
  }

  // A copy of the parameters in the tensor's dtype, owned by the reply.
  static reply snapshot(const key& k, std::uint64_t round) {
    auto copy = std::make_shared_for_overwrite<std::byte[]>(k.bytes);
    reduce::accumulate_finish(copy.get(), k.master.data(), k.count(), k.type);
    return {std::span<const std::byte>(copy.get(), k.bytes), round, k.type, k.offset,
            k.tensor_bytes, std::shared_ptr<const void>(copy, copy.get())};
  }

  std::int64_t staleness_;
  std::unordered_map<key_id, key, key_id_hash> keys_;
};

static_assert(ServerHandler<async_sum>);

}  // namespace bps::server
