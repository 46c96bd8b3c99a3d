// Elastic training with asynchronous training (docs/reliability.md "Elastic training"): a removed
// worker no longer holds the others back, and the lowest worker left seeds what rank 0 did not.
#include <catch2/catch.hpp>
#include <future>
#include <latch>
#include <optional>

#include "cluster.hpp"
#include "elastic_cluster.hpp"
#include "faulty_cluster.hpp"
#include "server_access.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;
using Catch::Contains;
using namespace bps::test::elastic;

namespace {

Config elastic_async_config(std::int64_t staleness) {
  Config c = elastic_config(3, 2);
  c.enable_async = true;
  c.async_staleness = staleness;
  return c;
}

using async_cluster = test::basic_cluster<server::async_sum>;

}  // namespace

TEST_CASE("elastic async, staleness 0: the workers a vanished worker held back are answered once "
          "it is removed",
          "[elastic][async]") {
  async_cluster c(elastic_async_config(0));
  std::promise<void> in[2];
  std::shared_future<void> pushed[2] = {in[0].get_future().share(), in[1].get_future().share()};
  std::string seed_seen;
  // Every round 0 is answered before any delta is pushed: a round 0 that came after one would
  // be answered with the parameters holding it (as it should).
  std::latch seeded(3);
  std::thread lost([&] {
    c.guard_worker([&] {
      hand_made_worker w(c.worker_config(2), 2);
      w.push("p", 0, 999.0f);  // round 0: not the seed (rank 0's is), answered with it
      seed_seen = w.answer();
      seeded.count_down();
      for (auto& p : pushed) p.wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      w.vanish();  // it never pushes round 1: with staleness 0 it holds the others back
    });
  });
  float params[2][2] = {};
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> p(count, m == 0 ? 10.0f : 20.0f);
        comm.push_pull("p", std::span(p)).wait();  // the seed: rank 0's 10
        params[m][0] = p[0];
        seeded.arrive_and_wait();
        std::fill(p.begin(), p.end(), static_cast<float>(m + 1));  // deltas 1 and 2
        auto h = comm.push_pull("p", std::span(p));
        in[m].set_value();
        h.wait();
        params[m][1] = p[count - 1];
      });
    });
  lost.join();
  for (auto& t : workers) t.join();
  c.join();
  CHECK_FALSE(c.node_error());
  CHECK(seed_seen == "10");
  for (int m = 0; m < 2; ++m) {
    INFO("worker " << m);
    CHECK(params[m][0] == 10.0f);
    CHECK(params[m][1] == 13.0f);  // held until both deltas were in, then answered
  }
}

TEST_CASE("elastic async: rank 0 vanishes before it seeds a tensor - the lowest worker left "
          "seeds it",
          "[elastic][async]") {
  async_cluster c(elastic_async_config(-1));
  std::promise<void> in[2];
  std::shared_future<void> pushed[2] = {in[0].get_future().share(), in[1].get_future().share()};
  std::thread lost([&] {
    c.guard_worker([&] {
      hand_made_worker w(c.worker_config(0), 0);
      for (auto& p : pushed) p.wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      w.vanish();  // it never pushed its round 0, which would have been the seed
    });
  });
  float params[2][2] = {};
  std::latch seeded(2);  // both round 0s answered before a delta (see the test above)
  std::vector<std::thread> workers;
  for (int m = 1; m <= 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> p(count, 10.0f * static_cast<float>(m + 1));  // 20 and 30
        auto h = comm.push_pull("p", std::span(p));
        in[m - 1].set_value();
        h.wait();
        params[m - 1][0] = p[0];
        seeded.arrive_and_wait();
        std::fill(p.begin(), p.end(), static_cast<float>(m));  // deltas 1 and 2
        comm.push_pull("p", std::span(p)).wait();
        comm.barrier();  // every delta is in
        std::fill(p.begin(), p.end(), 0.0f);
        comm.push_pull("p", std::span(p)).wait();
        params[m - 1][1] = p[count / 2];
      });
    });
  lost.join();
  for (auto& t : workers) t.join();
  c.join();
  CHECK_FALSE(c.node_error());
  for (int m = 0; m < 2; ++m) {
    INFO("worker " << m + 1);
    CHECK(params[m][0] == 20.0f);  // machine 1's round 0: the lowest member's
    CHECK(params[m][1] == 23.0f);
  }
}
