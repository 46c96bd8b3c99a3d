#pragma once
// Waiting in a test for something it can observe, instead of sleeping and hoping: asks `done`
// every `step` until it says yes or `within` has passed; returns its last answer. A sleep that
// should have been long enough is what failed under ThreadSanitizer's slowness.
#include <chrono>
#include <thread>

namespace bps::test {

template <class Pred>
bool poll_until(Pred done, std::chrono::milliseconds within,
                std::chrono::milliseconds step = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(step);
  }
  return true;
}

}  // namespace bps::test
