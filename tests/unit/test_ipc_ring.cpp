#include <byteps/transport/ipc/ipc_ring.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

// transport::ipc's reading end of a ring: payloads a server sums in place are freed in any
// order, on any thread, while the ring has one cursor that must only ever move forward over
// freed payloads.

namespace {

using bps::transport::ipc_detail::ring_regions;

}  // namespace

TEST_CASE("ipc ring regions: payloads freed in order move the cursor to each one's end",
          "[transport][ipc]") {
  ring_regions r;
  std::atomic<std::uint64_t> consumed{0};
  r.take(0, 100);
  r.take(100, 50);
  CHECK(r.release(0, consumed));
  CHECK(consumed == 100);
  CHECK(r.release(100, consumed));
  CHECK(consumed == 150);
  CHECK(r.in_use() == 0);
}

TEST_CASE("ipc ring regions: a payload freed before an older one waits for it, then the cursor "
          "moves over both",
          "[transport][ipc]") {
  ring_regions r;
  std::atomic<std::uint64_t> consumed{0};
  r.take(0, 100);
  r.take(100, 200);
  r.take(300, 10);
  CHECK_FALSE(r.release(300, consumed));  // the youngest first: nothing moves
  CHECK_FALSE(r.release(100, consumed));
  CHECK(consumed == 0);
  CHECK(r.in_use() == 3);
  CHECK(r.release(0, consumed));  // the oldest: the cursor passes all three
  CHECK(consumed == 310);
  CHECK(r.in_use() == 0);
  // The middle one freed last: the cursor stops before it, then passes it.
  r.take(310, 5);
  r.take(315, 5);
  r.take(320, 5);
  CHECK(r.release(310, consumed));
  CHECK(consumed == 315);
  CHECK_FALSE(r.release(320, consumed));
  CHECK(consumed == 315);
  CHECK(r.release(315, consumed));
  CHECK(consumed == 325);
}

TEST_CASE("ipc ring regions: a payload that skipped to the ring's start (wrap-around) frees the "
          "gap before it with itself",
          "[transport][ipc]") {
  // A ring of 1000 bytes: the producer put 600 at 0, then 300 at 600; 200 more do not fit before
  // the end (900 + 200 > 1000), so it skipped to 1000 (the ring's start again).
  ring_regions r;
  std::atomic<std::uint64_t> consumed{0};
  r.take(0, 600);
  r.take(600, 300);
  r.take(1000, 200);
  CHECK_FALSE(r.release(1000, consumed));
  CHECK(r.release(0, consumed));
  CHECK(consumed == 600);
  CHECK(r.release(600, consumed));
  CHECK(consumed == 1200);  // past the skipped tail and the wrapped payload
  r.take(1200, 700);
  r.take(2000, 150);  // wrapped once more: 150 more did not fit in the 100 left at 1900
  CHECK_FALSE(r.release(2000, consumed));
  CHECK(consumed == 1200);
  CHECK(r.release(1200, consumed));
  CHECK(consumed == 2150);
}

TEST_CASE("ipc ring regions: a position never taken or freed twice changes nothing",
          "[transport][ipc]") {
  ring_regions r;
  std::atomic<std::uint64_t> consumed{0};
  r.take(0, 10);
  r.take(10, 10);
  CHECK_FALSE(r.release(5, consumed));
  CHECK_FALSE(r.release(20, consumed));
  CHECK_FALSE(r.release(10, consumed));
  CHECK_FALSE(r.release(10, consumed));  // twice
  CHECK(consumed == 0);
  CHECK(r.in_use() == 2);
  CHECK(r.release(0, consumed));
  CHECK(consumed == 20);
  CHECK_FALSE(r.release(0, consumed));  // twice, after the cursor passed it
  CHECK(consumed == 20);
}

TEST_CASE("ipc ring regions: payloads freed on many threads at once leave the cursor at the end "
          "of all of them, never moving back",
          "[transport][ipc]") {
  constexpr int threads = 8, each = 2000;
  ring_regions r;
  std::atomic<std::uint64_t> consumed{0};
  for (std::uint64_t i = 0; i < threads * each; ++i) r.take(i * 16, 16);
  std::atomic<bool> went_back{false};
  std::vector<std::thread> pool;
  // Thread t frees payloads t, t + threads, ... from the last to the first: out of order
  // within a thread and across threads.
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::uint64_t seen = 0;
      for (int i = each - 1; i >= 0; --i) {
        r.release(static_cast<std::uint64_t>(i * threads + t) * 16, consumed);
        const auto now = consumed.load();
        if (now < seen) went_back = true;
        seen = now;
      }
    });
  for (auto& t : pool) t.join();
  CHECK_FALSE(went_back);
  CHECK(consumed == std::uint64_t{threads} * each * 16);
  CHECK(r.in_use() == 0);
}
