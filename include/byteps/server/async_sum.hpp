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
/// - **Failover** (`Config::failover()`). Every answer also carries each worker's count of
///   deltas the parameters hold (wire::flag_applied), and a worker keeps its last answer. When a
///   server dies, each worker offers its last answer to the replacement (`sum_offer`) before it
///   re-pushes the delta in flight; the replacement takes the offer that holds the most deltas,
///   and applies exactly the re-pushed deltas that offer does not hold, however the offers and
///   pushes of different workers interleave (server/async_key.hpp says why that is enough). A
///   re-joining worker's first push to the replacement may so be of any round up to its next.
///   Until every worker was heard from for a key (an offer or a push), its answers are held, and
///   the offer or push that completes it answers them (async_key.hpp says why): on a server that
///   has the key from the start, each worker's round 0 waits for every worker's.
/// - **Elastic training** (`Config::elastic()`): see `restart_rounds`.

#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/linkage.hpp"
#include "byteps/detail/buffer_pool.hpp"
#include "byteps/reduce/reducer.hpp"
#include "byteps/server/async_key.hpp"
#include "byteps/server/handler.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

class async_sum {
 public:
  /// @throws usage_error when `cfg` is not in async mode: workers would get parameters where
  /// they expect sums.
  /// Landed pushes (RDMA): each is read during `handle` only (added to the parameters, or
  /// dropped while the key waits for its seed), so the landing buffer is free again before the
  /// worker's answer.
  static constexpr bool reads_in_place = true;

  async_sum(const Config& cfg, detail::buffer_pool&)
      : staleness_(cfg.async_staleness), elastic_(cfg.elastic()) {
    check_config(cfg);
  }

  /// @throws usage_error when `cfg` is not in async mode (see the constructor).
  BYTEPS_DECL static void check_config(const Config& cfg);

  BYTEPS_DECL outcome handle(const request& r);

  /// Elastic training (`restarts_rounds`, server/handler.hpp): only the workers `members` marks
  /// take part from now on. No round spans workers here, so nothing starts over; instead the
  /// slowest worker (the staleness bound) is taken over members only, a tensor not seeded yet
  /// is seeded by the lowest member, and every member held (by the bound, or waiting for the
  /// seed) is asked to push its round again, which settles it under the new members: answered,
  /// or held again. A removed worker's held push is dropped.
  BYTEPS_DECL std::vector<round_redo> restart_rounds(const std::vector<bool>& members);

  /// Deltas applied to partition `part` of tensor `key` (0 before and at the seed); nullopt for
  /// a partition never pushed. For tests and tools.
  std::optional<std::uint64_t> version(std::uint64_t key, std::uint32_t part) const {
    auto it = keys_.find(key_id{key, part});
    if (it == keys_.end() || !it->second.shaped) return std::nullopt;
    return it->second.version;
  }

 private:
  using key = async_key;

  // What is wrong with this push or offer, for its worker alone; "" when it may be taken. The
  // first push or offer ever fixes the key's shape, as in synchronous mode.
  BYTEPS_DECL std::string check(key& k, const wire::header& h, const request& r) const;

  // Failover: worker r.worker's last answer from a server that died since. The offer that holds
  // the most deltas becomes the parameters (with the deltas applied here that it lacks). When it
  // is the last worker the key had not heard from, or it raised the slowest count, the held
  // workers it frees are answered.
  BYTEPS_DECL outcome take_offer(key& k, const request& r);

  // Worker w's push of `round` is in the parameters (`applied`: it added its delta now): w is
  // answered, or held while the key is recovering (async_key.hpp says why) or, after applying,
  // while w is more than s ahead of the slowest worker. When this push `recovered` the key or
  // raised the slowest count past `slowest_before`, the held workers it frees are answered too.
  BYTEPS_DECL outcome settle(key& k, std::size_t w, std::uint64_t round, bool applied,
                             bool recovered, std::uint64_t slowest_before);

  // Each held worker no longer more than s ahead, answered with `shared`'s bytes and its own
  // round, and no longer held. Called only when the key is not recovering.
  BYTEPS_DECL std::vector<held_answer> release_held(key& k, const reply& shared) const;

  // A copy of the parameters in the tensor's dtype, owned by the reply; with failover, followed
  // by each worker's count of deltas they hold (wire::flag_applied).
  BYTEPS_DECL static reply snapshot(const key& k, std::uint64_t round);

  // The fewest deltas of a worker taking part (every worker, without elastic training).
  std::uint64_t slowest(const key& k) const noexcept {
    std::uint64_t least = UINT64_MAX;
    for (std::size_t w = 0; w < k.pushes.size(); ++w)
      if (member(w)) least = std::min(least, k.pushes[w]);
    return least == UINT64_MAX ? 0 : least;
  }
  bool member(std::size_t w) const noexcept { return members_.empty() || members_[w]; }
  // Whose round-0 push seeds a tensor: rank 0, or after it left the lowest member.
  int seeder() const noexcept {
    for (std::size_t w = 0; w < members_.size(); ++w)
      if (members_[w]) return static_cast<int>(w);
    return 0;
  }

  std::int64_t staleness_;
  bool elastic_ = false;
  std::vector<bool> members_;  // elastic: who takes part (empty: every worker)
  std::unordered_map<key_id, key, key_id_hash> keys_;
};

static_assert(ServerHandler<async_sum>);
static_assert(restarts_rounds<async_sum>);

}  // namespace bps::server

#if BYTEPS_INCLUDE_BODIES
#include "byteps/server/impl/async_sum.hpp"
#endif
