#pragma once
/// @file
/// `bps::local::order_board`: how the local ranks of one machine agree on the order of their
/// collectives, in shared memory, without CUDA (so it is tested on machines with no GPU).
///
/// NCCL requires every rank of a communicator to issue the same collectives in the same order,
/// but each process's trainer calls push_pull in its own order (threads, priorities, layers
/// finishing at different times). As in BytePS, local rank 0 decides: every local rank
/// announces "tensor K, round R is ready for phase P" in its own mailbox; local rank 0 counts
/// the announcements and, once every local rank made one, appends the entry to the order ring;
/// every local rank then issues the ring's entries in ring order. An entry is only posted when
/// all local ranks are ready for it, so issuing never waits on a peer that has not come.
///
/// The board also carries what the local ranks must share besides the order: the NCCL unique
/// id (written by local rank 0) and the first failure (`poison`), after which every local rank
/// aborts its NCCL communicator and fails what is in flight.
///
/// Memory: `bytes(local_size)` zeroed bytes (a fresh `shm_segment` is), laid out as a header,
/// one 64-byte slot per local rank, the order ring, and one mailbox ring per local rank. Each
/// ring has one writer; counters are published with release stores and read with acquire loads.
///
/// @par Thread Safety
/// One `order_board` object per local rank, used by that rank's stage thread only; the shared
/// memory behind it is used by all of them at once.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

#include <fmt/core.h>

#include "byteps/core/error.hpp"
#include "byteps/local/shm.hpp"

namespace bps::local {

/// The two collectives of a push_pull: the reduce (before the network) and the gather (after).
enum class order_phase : std::uint32_t { reduce = 0, gather = 1 };

inline constexpr std::string_view order_phase_name(order_phase p) noexcept {
  return p == order_phase::reduce ? "reduce" : "gather";
}

/// One announcement or one posted entry.
struct order_entry {
  std::uint64_t key = 0;          ///< the tensor's key (`tensor_key(name)`)
  std::uint64_t round = 0;        ///< how many operations this tensor had before this one
  std::uint64_t fingerprint = 0;  ///< count and dtype: local ranks that disagree are caught
  order_phase phase = order_phase::reduce;
  std::uint32_t flags = 0;  ///< `entry_failed`: some local rank's slices failed (OR of all)
};
static_assert(sizeof(order_entry) == 32);

/// In `order_entry::flags`: the network part failed on some local rank; the gather still runs
/// (every rank must issue it), and every local rank fails the operation afterwards.
inline constexpr std::uint32_t entry_failed = 1;

/// How many entries an `order_board`'s rings hold.
struct order_capacities {
  std::uint32_t order = 4096;    ///< entries in the order ring
  std::uint32_t mailbox = 1024;  ///< announcements in each local rank's mailbox
};

class order_board {
 public:
  static constexpr std::size_t id_bytes = 128;   ///< room for the NCCL unique id
  static constexpr std::size_t why_bytes = 512;  ///< the first failure's message, truncated
  using capacities = order_capacities;

  /// Bytes of shared memory a board for `local_size` local ranks needs.
  static std::size_t bytes(int local_size, capacities c = {}) {
    return header_bytes + slot_bytes * static_cast<std::size_t>(local_size) +
           sizeof(order_entry) * (c.order + static_cast<std::size_t>(c.mailbox) *
                                                static_cast<std::size_t>(local_size));
  }

  /// `memory`: `bytes(local_size, c)` bytes, zeroed before any local rank used them.
  order_board(std::byte* memory, int local_size, int local_rank, capacities c = {})
      : base_(memory), local_size_(local_size), local_rank_(local_rank), caps_(c) {
    if (local_size < 1 || local_rank < 0 || local_rank >= local_size || c.order == 0 ||
        c.mailbox == 0)
      throw usage_error(fmt::format("order_board: local rank {} of {} (order ring {}, mailbox "
                                    "{}) is not a valid board",
                                    local_rank, local_size, c.order, c.mailbox));
  }

  int local_rank() const noexcept { return local_rank_; }
  int local_size() const noexcept { return local_size_; }

  /// The futex every local rank's stage thread sleeps on; ring it after changing the board.
  doorbell bell() const noexcept { return doorbell(bell_word()); }
  /// The doorbell's word in shared memory (for a ring from outside this object).
  std::atomic<std::uint32_t>* bell_word() const noexcept { return &header()->bell; }

  // ---- every local rank ----

  /// Puts `e` in this rank's mailbox for local rank 0. False when the mailbox is full (local
  /// rank 0 has not read it yet): keep `e` and try again after the bell rang.
  bool announce(const order_entry& e) noexcept {
    slot& s = slot_of(local_rank_);
    const auto head = s.head.load(std::memory_order_relaxed);
    if (head - s.tail.load(std::memory_order_acquire) >= caps_.mailbox) return false;
    mailbox(local_rank_)[head % caps_.mailbox] = e;
    s.head.store(head + 1, std::memory_order_release);
    return true;
  }

  /// The next posted entry this rank has not issued yet, if any.
  std::optional<order_entry> next() const noexcept {
    const auto done = slot_of(local_rank_).consumed.load(std::memory_order_relaxed);
    if (done >= header()->posted.load(std::memory_order_acquire)) return std::nullopt;
    return ring()[done % caps_.order];
  }

  /// This rank issued the entry `next()` returned (its ring slot may be reused).
  void issued() noexcept {
    slot& s = slot_of(local_rank_);
    s.consumed.store(s.consumed.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  /// Entries posted so far, and entries this rank issued.
  std::uint64_t posted() const noexcept {
    return header()->posted.load(std::memory_order_acquire);
  }
  std::uint64_t issued_count() const noexcept {
    return slot_of(local_rank_).consumed.load(std::memory_order_relaxed);
  }

  /// Records the machine's first failure. True when this call was the first.
  bool poison(std::string_view why) noexcept {
    std::uint32_t expected = 0;
    auto& p = header()->poisoned;
    if (!p.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return false;
    const auto n = std::min(why.size(), why_bytes - 1);
    std::memcpy(header()->why, why.data(), n);
    header()->why[n] = '\0';
    p.store(2, std::memory_order_release);
    return true;
  }

  /// The machine's first failure, if some local rank recorded one.
  std::optional<std::string> poisoned() const {
    const auto v = header()->poisoned.load(std::memory_order_acquire);
    if (v == 0) return std::nullopt;
    if (v == 1) return std::string("another local rank of this machine failed (its log says why)");
    return std::string(header()->why);
  }

  /// Local rank 0: publishes the NCCL unique id (at most `id_bytes`).
  void publish_id(std::span<const std::byte> id) noexcept {
    std::memcpy(header()->id, id.data(), std::min(id.size(), id_bytes));
    header()->id_ready.store(1, std::memory_order_release);
  }

  /// The id local rank 0 published, copied into `out`; false while it has not.
  bool read_id(std::span<std::byte> out) const noexcept {
    if (header()->id_ready.load(std::memory_order_acquire) == 0) return false;
    std::memcpy(out.data(), header()->id, std::min(out.size(), id_bytes));
    return true;
  }

  // ---- local rank 0 ----

  /// Local rank 0: reads every mailbox, and posts, in the order they became complete, the
  /// entries that every local rank announced (as many as the ring has room for: it waits for
  /// the slowest rank to issue). True when anything moved. Throws `usage_error` when two local
  /// ranks announced one tensor round with different fingerprints; `name_of(key)` names it.
  template <class NameOf>
  bool coordinate(NameOf&& name_of) {
    bool moved = false;
    for (int r = 0; r < local_size_; ++r) {
      slot& s = slot_of(r);
      const auto head = s.head.load(std::memory_order_acquire);
      auto tail = s.tail.load(std::memory_order_relaxed);
      for (; tail < head; ++tail) {
        const order_entry e = mailbox(r)[tail % caps_.mailbox];
        tally& t = tallies_[std::tuple(e.key, e.round, e.phase)];
        if (t.count == 0) {
          t.first = e;
          t.first_rank = r;
        } else if (t.first.fingerprint != e.fingerprint) {
          s.tail.store(tail + 1, std::memory_order_release);
          throw usage_error(fmt::format(
              "{}: local ranks {} and {} of this machine pass it with different shapes or "
              "dtypes (every local rank must pass the same count and dtype)",
              name_of(e.key), t.first_rank, r));
        }
        t.first.flags |= e.flags;
        if (++t.count == local_size_) {
          complete_.push_back(t.first);
          tallies_.erase(std::tuple(e.key, e.round, e.phase));
        }
        moved = true;
      }
      s.tail.store(tail, std::memory_order_release);
    }
    auto posted = header()->posted.load(std::memory_order_relaxed);
    const auto slowest = slowest_consumer();
    while (!complete_.empty() && posted - slowest < caps_.order) {
      ring()[posted % caps_.order] = complete_.front();
      complete_.pop_front();
      ++posted;
      header()->posted.store(posted, std::memory_order_release);
      moved = true;
    }
    return moved;
  }

  /// Local rank 0: entries complete but not yet posted (the ring is full), and tensor rounds
  /// announced by some local ranks but not all.
  std::size_t unposted() const noexcept { return complete_.size(); }
  std::size_t incomplete() const noexcept { return tallies_.size(); }

 private:
  struct header_block {
    std::atomic<std::uint32_t> bell;
    std::atomic<std::uint32_t> poisoned;  // 0: no; 1: the message is being written; 2: yes
    std::atomic<std::uint32_t> id_ready;
    std::uint32_t unused;
    std::atomic<std::uint64_t> posted;  // entries in the order ring, ever
    char why[why_bytes];
    std::byte id[id_bytes];
  };
  struct slot {
    std::atomic<std::uint64_t> consumed;  // order entries this rank issued
    std::atomic<std::uint64_t> head;      // announcements this rank wrote
    std::atomic<std::uint64_t> tail;      // announcements local rank 0 read
    std::byte pad[40];
  };
  static_assert(sizeof(slot) == 64);
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
  static constexpr std::size_t header_bytes = (sizeof(header_block) + 63) / 64 * 64;
  static constexpr std::size_t slot_bytes = sizeof(slot);

  struct tally {
    order_entry first;
    int first_rank = 0;
    int count = 0;
  };

  header_block* header() const noexcept { return reinterpret_cast<header_block*>(base_); }
  slot& slot_of(int r) const noexcept {
    return *reinterpret_cast<slot*>(base_ + header_bytes + slot_bytes * static_cast<std::size_t>(r));
  }
  order_entry* ring() const noexcept {
    return reinterpret_cast<order_entry*>(base_ + header_bytes +
                                          slot_bytes * static_cast<std::size_t>(local_size_));
  }
  order_entry* mailbox(int r) const noexcept {
    return ring() + caps_.order + static_cast<std::size_t>(caps_.mailbox) * static_cast<std::size_t>(r);
  }
  std::uint64_t slowest_consumer() const noexcept {
    auto least = slot_of(0).consumed.load(std::memory_order_acquire);
    for (int r = 1; r < local_size_; ++r)
      least = std::min(least, slot_of(r).consumed.load(std::memory_order_acquire));
    return least;
  }

  std::byte* base_;
  int local_size_;
  int local_rank_;
  capacities caps_;
  // Local rank 0 only.
  std::map<std::tuple<std::uint64_t, std::uint64_t, order_phase>, tally> tallies_;
  std::deque<order_entry> complete_;
};

}  // namespace bps::local
