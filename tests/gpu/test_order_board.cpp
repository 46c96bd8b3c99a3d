// bps::local::order_board: the part of the NCCL local stage that needs no GPU. Local ranks
// (threads here, each with its own board object over one shared block of memory, as processes
// over one shm segment) announce tensor rounds in different orders; local rank 0 posts each
// once every rank announced it; every rank then sees the same sequence. Also: a full mailbox,
// a full order ring, ranks that disagree on a shape, the first failure, the NCCL id, and how
// a tensor's elements are split among the local ranks (owned_range).
#include <byteps/local/order_board.hpp>

#include <byteps/local/local_collective.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace bps;
using namespace bps::local;

namespace {

// Zeroed, 64-byte aligned memory standing in for a fresh shared-memory segment.
struct board_memory {
  explicit board_memory(std::size_t bytes)
      : p(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{64}))) {
    std::fill_n(p, bytes, std::byte{0});
  }
  ~board_memory() { ::operator delete(p, std::align_val_t{64}); }
  board_memory(const board_memory&) = delete;
  board_memory& operator=(const board_memory&) = delete;
  std::byte* p;
};

std::string no_name(std::uint64_t key) { return "key " + std::to_string(key); }

order_entry entry(std::uint64_t key, std::uint64_t round, order_phase phase,
                  std::uint32_t flags = 0) {
  return {key, round, key * 31 + 7, phase, flags};
}

}  // namespace

TEST_CASE("order board: an entry is posted once every local rank announced it",
          "[order_board]") {
  const int n = 3;
  board_memory mem(order_board::bytes(n));
  std::vector<order_board> boards;
  for (int r = 0; r < n; ++r) boards.emplace_back(mem.p, n, r);

  REQUIRE(boards[1].announce(entry(10, 0, order_phase::reduce)));
  REQUIRE(boards[2].announce(entry(20, 0, order_phase::reduce)));
  CHECK(boards[0].coordinate(no_name));
  CHECK(boards[0].posted() == 0);  // nobody announced anything all three did
  CHECK(boards[0].incomplete() == 2);

  REQUIRE(boards[0].announce(entry(20, 0, order_phase::reduce)));
  REQUIRE(boards[1].announce(entry(20, 0, order_phase::reduce)));
  boards[0].coordinate(no_name);
  CHECK(boards[0].posted() == 1);
  for (auto& b : boards) {
    auto e = b.next();
    REQUIRE(e);
    CHECK(e->key == 20);
    CHECK(e->phase == order_phase::reduce);
    b.issued();
    CHECK_FALSE(b.next());
  }
  CHECK(boards[0].incomplete() == 1);  // key 10 waits for ranks 0 and 2
}

TEST_CASE("order board: the gather carries the OR of every rank's failure flag",
          "[order_board]") {
  const int n = 2;
  board_memory mem(order_board::bytes(n));
  order_board a(mem.p, n, 0), b(mem.p, n, 1);
  REQUIRE(a.announce(entry(5, 3, order_phase::gather)));
  REQUIRE(b.announce(entry(5, 3, order_phase::gather, entry_failed)));
  a.coordinate(no_name);
  auto e = b.next();
  REQUIRE(e);
  CHECK(e->round == 3);
  CHECK((e->flags & entry_failed) != 0);
}

TEST_CASE("order board: local ranks that disagree on a tensor's shape are named",
          "[order_board]") {
  const int n = 2;
  board_memory mem(order_board::bytes(n));
  order_board a(mem.p, n, 0), b(mem.p, n, 1);
  auto mine = entry(7, 0, order_phase::reduce);
  auto theirs = mine;
  theirs.fingerprint += 1;
  REQUIRE(a.announce(mine));
  REQUIRE(b.announce(theirs));
  try {
    a.coordinate([](std::uint64_t) { return std::string("push_pull of 'w'"); });
    FAIL("coordinate accepted different fingerprints");
  } catch (const usage_error& e) {
    const std::string what = e.what();
    CHECK(what.find("push_pull of 'w'") != std::string::npos);
    CHECK(what.find("local ranks 0 and 1") != std::string::npos);
  }
}

TEST_CASE("order board: a full mailbox refuses, and takes again once read", "[order_board]") {
  const int n = 2;
  const order_board::capacities caps{8, 4};
  board_memory mem(order_board::bytes(n, caps));
  order_board a(mem.p, n, 0, caps), b(mem.p, n, 1, caps);
  for (std::uint64_t k = 0; k < 4; ++k) REQUIRE(b.announce(entry(k, 0, order_phase::reduce)));
  CHECK_FALSE(b.announce(entry(99, 0, order_phase::reduce)));
  a.coordinate(no_name);  // reads rank 1's mailbox
  CHECK(b.announce(entry(99, 0, order_phase::reduce)));
}

TEST_CASE("order board: the ring waits for the slowest rank before reusing a slot",
          "[order_board]") {
  const int n = 2;
  const order_board::capacities caps{4, 16};
  board_memory mem(order_board::bytes(n, caps));
  order_board a(mem.p, n, 0, caps), b(mem.p, n, 1, caps);
  for (std::uint64_t k = 0; k < 6; ++k) {
    REQUIRE(a.announce(entry(k, 0, order_phase::reduce)));
    REQUIRE(b.announce(entry(k, 0, order_phase::reduce)));
  }
  a.coordinate(no_name);
  CHECK(a.posted() == 4);
  CHECK(a.unposted() == 2);
  for (int i = 0; i < 4; ++i) {  // rank 0 issues everything, rank 1 nothing yet
    REQUIRE(a.next());
    a.issued();
  }
  a.coordinate(no_name);
  CHECK(a.posted() == 4);  // rank 1 has not issued slot 0 yet
  REQUIRE(b.next());
  CHECK(b.next()->key == 0);
  b.issued();
  a.coordinate(no_name);
  CHECK(a.posted() == 5);
  // Rank 1 still reads every entry in order.
  for (std::uint64_t k = 1; k < 5; ++k) {
    auto e = b.next();
    REQUIRE(e);
    CHECK(e->key == k);
    b.issued();
  }
}

TEST_CASE("order board: the first failure wins and every rank reads it", "[order_board]") {
  const int n = 3;
  board_memory mem(order_board::bytes(n));
  order_board a(mem.p, n, 0), b(mem.p, n, 1), c(mem.p, n, 2);
  CHECK_FALSE(a.poisoned());
  CHECK(b.poison("local rank 1: the deadline passed"));
  CHECK_FALSE(c.poison("local rank 2: something later"));
  REQUIRE(a.poisoned());
  CHECK(*a.poisoned() == "local rank 1: the deadline passed");
  const std::string longer(2000, 'x');
  board_memory mem2(order_board::bytes(n));
  order_board d(mem2.p, n, 0);
  CHECK(d.poison(longer));
  CHECK(d.poisoned()->size() == order_board::why_bytes - 1);  // truncated, still terminated
}

TEST_CASE("order board: local rank 0 publishes the NCCL id", "[order_board]") {
  const int n = 2;
  board_memory mem(order_board::bytes(n));
  order_board a(mem.p, n, 0), b(mem.p, n, 1);
  std::vector<std::byte> id(128), got(128);
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::byte>(i * 7 + 1);
  CHECK_FALSE(b.read_id(got));
  a.publish_id(id);
  REQUIRE(b.read_id(got));
  CHECK(got == id);
}

TEST_CASE("order board: invalid shapes are refused", "[order_board]") {
  board_memory mem(order_board::bytes(2));
  CHECK_THROWS_AS(order_board(mem.p, 2, 2), usage_error);
  CHECK_THROWS_AS(order_board(mem.p, 0, 0), usage_error);
  CHECK_THROWS_AS(order_board(mem.p, 2, 0, {0, 4}), usage_error);
}

// Four ranks as threads, each announcing the same 200 tensor rounds (both phases) in its own
// random order, gathers only after its reduce was issued, as the NCCL stage does. Every rank
// must issue the same sequence, each entry after every rank announced it.
TEST_CASE("order board: four ranks in random orders issue one sequence", "[order_board]") {
  const int n = 4;
  const order_board::capacities caps{16, 8};  // small rings: exercise wrap-around and backlog
  board_memory mem(order_board::bytes(n, caps));
  constexpr std::uint64_t tensors = 200;
  std::vector<std::vector<order_entry>> issued(n);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      order_board board(mem.p, n, r, caps);
      std::vector<std::uint64_t> order(tensors);
      for (std::uint64_t k = 0; k < tensors; ++k) order[k] = k;
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(r) + 1));
      std::vector<order_entry> outbox;
      for (auto k : order) outbox.push_back(entry(k, 0, order_phase::reduce));
      std::size_t sent = 0;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (issued[r].size() < 2 * tensors && !failed) {
        if (std::chrono::steady_clock::now() > deadline) {
          failed = true;
          break;
        }
        while (sent < outbox.size() && board.announce(outbox[sent])) ++sent;
        if (r == 0) board.coordinate(no_name);
        while (auto e = board.next()) {
          issued[r].push_back(*e);
          board.issued();
          if (e->phase == order_phase::reduce)  // its gather may come once the reduce ran
            outbox.push_back(entry(e->key, 0, order_phase::gather));
        }
        std::this_thread::yield();
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE_FALSE(failed);
  for (int r = 1; r < n; ++r) {
    REQUIRE(issued[r].size() == issued[0].size());
    for (std::size_t i = 0; i < issued[0].size(); ++i) {
      CHECK(issued[r][i].key == issued[0][i].key);
      CHECK(issued[r][i].phase == issued[0][i].phase);
    }
  }
  // Each tensor's reduce comes before its gather, each exactly once.
  std::vector<int> seen(tensors, 0);
  for (const auto& e : issued[0]) {
    if (e.phase == order_phase::reduce) {
      CHECK(seen[e.key] == 0);
      seen[e.key] = 1;
    } else {
      CHECK(seen[e.key] == 1);
      seen[e.key] = 2;
    }
  }
  CHECK(std::count(seen.begin(), seen.end(), 2) == static_cast<long>(tensors));
}

TEST_CASE("owned_range: contiguous runs that cover the tensor, cut like the slices",
          "[order_board]") {
  for (int slices : {1, 2, 3, 4, 8})
    for (int local_size = 1; local_size <= slices; ++local_size)
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{7},
                                std::size_t{1023}, std::size_t{100003}}) {
        std::size_t next = 0;
        for (int l = 0; l < local_size; ++l) {
          const auto [begin, end] = owned_range(count, l, local_size, slices);
          CHECK(begin == next);
          CHECK(end >= begin);
          const auto [first, last] = owned_slices(l, local_size, slices);
          CHECK(begin == slice_range(count, first, slices).first);
          CHECK(end == slice_range(count, last - 1, slices).second);
          next = end;
        }
        CHECK(next == count);
      }
}
