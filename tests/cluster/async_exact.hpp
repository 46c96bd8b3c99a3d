#pragma once
// Asynchronous training's exact-sum run, shared by test_async.cpp and test_async_failover.cpp:
// int32 and int64 tensors whose final parameters must be rank 0's initial values plus every
// worker's every delta, exactly (integers wrap, so any lost or doubled delta shows), and random
// delays that make workers' pushes interleave differently at the servers.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "faulty_cluster.hpp"

namespace bps::test {

using namespace std::chrono_literals;

constexpr int async_rounds = 12;
constexpr std::size_t big_count = 5000, small_count = 7;

// Worker `rank`'s initial values (only rank 0's become the parameters) and its delta of round
// `round` (>= 1). Large enough that int32 sums wrap.
template <class T>
T initial(int rank, std::size_t i) {
  return static_cast<T>(static_cast<std::int64_t>(i * 2654435761u) + rank * 1000003);
}
template <class T>
T delta(int rank, int round, std::size_t i) {
  const auto u = static_cast<std::uint64_t>(i + 1) * 0x9e3779b97f4a7c15ull +
                 static_cast<std::uint64_t>(rank * 131 + round) * 0xbf58476d1ce4e5b9ull;
  return static_cast<T>(u >> 7);
}
template <class T>
T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}

// The parameters at the end: rank 0's initial values plus every worker's every delta.
template <class T>
std::vector<T> expected_final(std::size_t n, int workers) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    T x = initial<T>(0, i);
    for (int w = 0; w < workers; ++w)
      for (int r = 1; r <= async_rounds; ++r) x = wrap_add(x, delta<T>(w, r, i));
    v[i] = x;
  }
  return v;
}

// One worker of the exact-sum run (`issued`, if given, runs after each round's push_pulls
// were issued and before they are awaited): the first push_pull of each tensor gives rank 0's
// initial values (a barrier after it, so that no delta is in yet: a worker whose first push_pull
// comes later gets the parameters as they are then); then `async_rounds` deltas; then, after a
// barrier (every delta is in), one zero-delta push_pull reads the final parameters.
template <class Comm>
void exact_worker(Comm& comm, int rank, int workers,
                  const std::function<void(int round)>& issued = nullptr) {
  std::vector<std::int32_t> big(big_count);
  std::vector<std::int64_t> small(small_count);
  for (std::size_t i = 0; i < big_count; ++i) big[i] = initial<std::int32_t>(rank, i);
  for (std::size_t i = 0; i < small_count; ++i) small[i] = initial<std::int64_t>(rank, i);
  auto a = comm.push_pull("big", std::span(big));
  auto b = comm.push_pull("small", std::span(small));
  a.wait();
  b.wait();
  for (std::size_t i = 0; i < big_count; ++i)
    BPS_EXPECT(big[i] == initial<std::int32_t>(0, i), "rank {}: big[{}] = {} is not rank 0's", rank,
               i, big[i]);
  for (std::size_t i = 0; i < small_count; ++i)
    BPS_EXPECT(small[i] == initial<std::int64_t>(0, i), "rank {}: small[{}] is not rank 0's", rank,
               i);
  comm.barrier();
  for (int r = 1; r <= async_rounds; ++r) {
    for (std::size_t i = 0; i < big_count; ++i) big[i] = delta<std::int32_t>(rank, r, i);
    for (std::size_t i = 0; i < small_count; ++i) small[i] = delta<std::int64_t>(rank, r, i);
    a = comm.push_pull("big", std::span(big));
    b = comm.push_pull("small", std::span(small));
    if (issued) issued(r);
    a.wait();
    b.wait();
  }
  comm.barrier();
  std::fill(big.begin(), big.end(), 0);
  std::fill(small.begin(), small.end(), 0);
  a = comm.push_pull("big", std::span(big));
  b = comm.push_pull("small", std::span(small));
  a.wait();
  b.wait();
  const auto want_big = expected_final<std::int32_t>(big_count, workers);
  const auto want_small = expected_final<std::int64_t>(small_count, workers);
  for (std::size_t i = 0; i < big_count; ++i)
    BPS_EXPECT(big[i] == want_big[i], "rank {}: final big[{}] = {}, want {}", rank, i, big[i],
               want_big[i]);
  for (std::size_t i = 0; i < small_count; ++i)
    BPS_EXPECT(small[i] == want_small[i], "rank {}: final small[{}] = {}, want {}", rank, i,
               small[i], want_small[i]);
}

// Random delays of 0-8 ms on a third of the pushes and answers, from a fixed seed: frames of a
// link stay in order, but workers' pushes reach the servers in ever-changing interleavings.
inline std::shared_ptr<transport::fault_plan> random_delays() {
  auto plan = std::make_shared<transport::fault_plan>();
  auto state = std::make_shared<std::uint64_t>(0x5eed);
  auto coin = [state](const transport::outgoing_frame&) {  // under the plan's lock
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (*state >> 33) % 3 == 0;
  };
  for (auto ms : {1ms, 3ms, 8ms}) {
    for (auto type : {wire::msg::push, wire::msg::pull_response})
      plan->add({.when = {.type = type, .also = coin},
                 .action = transport::fault::delay(ms),
                 .times = transport::fault_rule::always});
  }
  return plan;
}

}  // namespace bps::test
