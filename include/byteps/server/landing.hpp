#pragma once
/// @file
/// Landing buffers: where a worker link's pushes land on a transport that registers memory
/// (RDMA), when the server's handler reads pushes in place (`server::reads_in_place`).
///
/// `landing_places` (one per worker link): each partition (key, part) the worker pushes gets one
/// buffer from the server's registered pool, kept from round to round while the link lives. So
/// the session can promise that the push's destination stays (`cached_destinations::destination_stays`),
/// the transport advertises its (address, rkey) once, and the worker writes every later round
/// straight there: no announce, no grant, no round trip.
///
/// Why reusing it is safe: a worker pushes round r+1 of a partition only after it received
/// round r's answer, and the server answers only after its handler read every push of the round
/// (lent `push_bytes`, landed pushes; sync_sum sums out of the landing buffers into its own
/// sum buffer, never adopting one). A compressed push that grows gets a larger buffer (1.5x at
/// least, so sizes settle after a few rounds); a smaller one fills the first bytes of the same.
///
/// Memory: one buffer per (worker link, partition), so a server holds about workers x its share
/// of the model in them, registered. `landing_budget` bounds their total over the server's links
/// (`Config::server_landing_bytes`); past it, a partition's pushes land per push in pool buffers
/// that do not stay, as on TCP, and ask for their place every round. A link's buffers go back to
/// the pool (and the budget) once the link closed and the handler let go of them.
///
/// @par Thread Safety
/// `landing_places`: its link's I/O thread only. `landing_budget`: any thread.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>

#include "byteps/core/keys.hpp"
#include "byteps/detail/buffer_pool.hpp"

namespace bps::server {

/// The bytes all landing buffers of a server may hold together (0: no bound).
class landing_budget {
 public:
  explicit landing_budget(std::size_t limit) : limit_(limit) {}

  /// Reserves `bytes`; false (and nothing reserved) when that would pass the bound. `first_miss`
  /// is set on the first refusal ever, for one log line.
  bool take(std::size_t bytes, bool& first_miss) {
    first_miss = false;
    if (limit_ == 0) return true;
    std::size_t used = used_.load();
    do {
      if (used + bytes > limit_) {
        first_miss = !missed_.exchange(true);
        return false;
      }
    } while (!used_.compare_exchange_weak(used, used + bytes));
    return true;
  }
  void give(std::size_t bytes) {
    if (limit_ != 0) used_ -= bytes;
  }
  std::size_t limit() const noexcept { return limit_; }

 private:
  std::size_t limit_;
  std::atomic<std::size_t> used_{0};
  std::atomic<bool> missed_{false};
};

class landing_places {
 public:
  using buffer_ptr = std::shared_ptr<detail::buffer_pool::buffer>;
  /// Makes a landing buffer of at least the size given, or null when the budget is spent.
  using make_fn = std::function<buffer_ptr(std::size_t)>;

  /// The buffer a push of `bytes` bytes of `id` lands in (its first `bytes`): the one of the
  /// last rounds when it is large enough, else a new one (the old one goes once the handler let
  /// go of it). Null when none can be had: the push lands in a buffer of its own.
  buffer_ptr take(const key_id& id, std::size_t bytes, const make_fn& make) {
    auto it = places_.find(id);
    if (it != places_.end() && it->second->size >= bytes) return it->second;
    const std::size_t grown =
        it != places_.end() ? std::max(bytes, it->second->size + it->second->size / 2) : bytes;
    auto fresh = make(grown);
    if (!fresh) {
      if (it != places_.end()) places_.erase(it);
      return nullptr;
    }
    places_.insert_or_assign(id, fresh);
    return fresh;
  }

  /// Whether `dest` is the landing buffer of `id` (its place stays for the next rounds).
  bool holds(const key_id& id, const std::byte* dest) const {
    auto it = places_.find(id);
    return it != places_.end() && it->second->data.get() == dest;
  }

  /// The link closed: its buffers go once the handler let go of them too.
  void clear() { places_.clear(); }

 private:
  std::unordered_map<key_id, buffer_ptr, key_id_hash> places_;
};

}  // namespace bps::server
