// Elastic training, joins (docs/reliability.md "Elastic training"): a worker that says hello to
// a running job joins it at a step boundary every member agrees on, with the state one of them
// sends; a join the members never reach is called off within BYTEPS_OP_TIMEOUT_MS, naming why.
#include <catch2/catch.hpp>
#include <atomic>
#include <future>
#include <latch>
#include <map>
#include <optional>

#include "cluster.hpp"
#include "elastic_cluster.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;
using Catch::Contains;
using namespace bps::test::elastic;

TEST_CASE("elastic join: a worker restarted with its DMLC_WORKER_ID takes its machine back - it "
          "gets the registered state and every sum counts it from the agreed step on",
          "[elastic]") {
  cluster c(elastic_config(3, 2));
  constexpr int after_join = 3;  // steps every worker runs from the join on
  std::promise<void> left;
  std::shared_future<void> gone = left.get_future().share();
  std::atomic<int> saw_removal{0};
  std::map<int, float> sums[3];  // by machine: step -> sum
  int join_step[3] = {-1, -1, -1};
  std::optional<membership_event> joined_event[3];
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> step(1, 0.0f);
        comm.register_state("step", std::span(step));
        for (int s = 0;; ++s) {
          step[0] = static_cast<float>(s);
          if (auto e = comm.step_boundary()) {
            if (!e->removed.empty()) ++saw_removal;
            if (!e->joined.empty()) {
              join_step[m] = s;
              joined_event[m] = e;
            }
          }
          if (join_step[m] >= 0 && s == join_step[m] + after_join) break;
          BPS_EXPECT(s < 3000, "no worker joined within 3000 steps");
          std::vector<float> w(count, static_cast<float>(m + 1));
          comm.push_pull("w", std::span(w)).wait();
          sums[m][s] = w[0];
          if (s == 0) gone.wait();  // worker 2 leaves after step 0
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      });
    });
  std::thread restarted([&] {
    c.guard_worker([&] {
      {
        comm_t comm(c.worker_config(2));
        std::vector<float> w(count, 3.0f);
        comm.push_pull("w", std::span(w)).wait();
        sums[2][0] = w[0];
        comm.shutdown();  // leaves: its machine is removed, the others go on
      }
      left.set_value();
      while (saw_removal < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      // Started again with the same DMLC_WORKER_ID: it takes machine 2 back.
      comm_t comm(c.worker_config(2));
      CHECK(comm.joined_running_job());
      std::vector<float> step(1, -1.0f);
      comm.register_state("step", std::span(step));
      joined_event[2] = comm.step_boundary();  // loads the state
      join_step[2] = static_cast<int>(step[0]);
      for (int s = join_step[2]; s < join_step[2] + after_join; ++s) {
        if (s > join_step[2]) CHECK_FALSE(comm.step_boundary().has_value());
        std::vector<float> w(count, 3.0f);
        comm.push_pull("w", std::span(w)).wait();
        sums[2][s] = w[0];
      }
    });
  });
  for (auto& t : workers) t.join();
  restarted.join();
  c.join();
  CHECK_FALSE(c.node_error());
  const int j = join_step[0];
  REQUIRE(j > 1);
  CHECK(join_step[1] == j);
  CHECK(join_step[2] == j);  // the state came from the boundary every member stopped at
  for (int m = 0; m < 3; ++m) {
    INFO("machine " << m);
    CHECK(sums[m][0] == 6.0f);  // all three
    REQUIRE(joined_event[m].has_value());
    CHECK(joined_event[m]->joined == std::vector<int>{2});
    CHECK(joined_event[m]->size == 3);
    CHECK(joined_event[m]->rank == m);
    for (int s = j; s < j + after_join; ++s) CHECK(sums[m][s] == 6.0f);  // counted from step j
  }
  CHECK(joined_event[2]->old_size == 0);
  CHECK(joined_event[2]->old_rank == -1);
  for (int m = 0; m < 2; ++m) {
    INFO("machine " << m);
    CHECK(joined_event[m]->old_size == 2);
    for (int s = 1; s < j; ++s) CHECK(sums[m][s] == 3.0f);  // without machine 2
  }
}

TEST_CASE("elastic join: while a worker never calls step_boundary the join is called off within "
          "BYTEPS_OP_TIMEOUT_MS naming why - and the job goes on",
          "[elastic]") {
  Config cfg = elastic_config(2, 1);
  cfg.max_workers = 3;
  cfg.op_timeout = std::chrono::seconds(2);
  cluster c(cfg);
  std::latch running(2);
  std::promise<void> told;
  std::shared_future<void> refused = told.get_future().share();
  float sums[2] = {};
  std::optional<membership_event> after[2];
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> w(count, static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w)).wait();
        running.count_down();
        // Worker 0 calls step_boundary() (and holds at the agreed one), worker 1 never does.
        if (m == 0)
          while (refused.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready)
            (void)comm.step_boundary();
        refused.wait();
        after[m] = comm.step_boundary();
        std::fill(w.begin(), w.end(), static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w)).wait();
        sums[m] = w[0];
      });
    });
  std::string why;
  double took = 0;
  running.wait();
  const auto began = std::chrono::steady_clock::now();
  try {
    comm_t newcomer(c.worker_config(-1));
  } catch (const usage_error& e) {
    why = e.what();
  }
  took = test::seconds_since(began);
  told.set_value();
  for (auto& t : workers) t.join();
  c.join();
  CHECK_FALSE(c.node_error());
  CHECK_THAT(why, Contains("cannot join the running job: the workers did not all reach an agreed "
                           "step boundary within 2000 ms (BYTEPS_OP_TIMEOUT_MS)"));
  CHECK(took < 2.0 + 4.0);  // the deadline, the heartbeat check that sees it, and slack
  for (int m = 0; m < 2; ++m) {
    INFO("worker " << m);
    CHECK(sums[m] == 3.0f);  // the two, nobody else
    CHECK_FALSE(after[m].has_value());
  }
}

TEST_CASE("elastic join, async: a worker joins a running asynchronous job - its deltas count from "
          "the round the job is at, and every delta is in the parameters once",
          "[elastic][async]") {
  Config cfg = elastic_config(2, 1);
  cfg.max_workers = 3;
  cfg.enable_async = true;
  cfg.async_staleness = 2;
  test::basic_cluster<server::async_sum> c(cfg);
  constexpr int after_join = 4;  // steps each worker runs from the join on
  std::latch going(2);
  int deltas[3] = {};
  float final_params[3] = {};
  int join_step[3] = {-1, -1, -1};
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> step(1, 0.0f);
        comm.register_state("step", std::span(step));
        std::vector<float> p(count, 0.0f);
        comm.push_pull("p", std::span(p)).wait();  // round 0: rank 0's zeros seed it
        going.count_down();
        for (int s = 1;; ++s) {
          step[0] = static_cast<float>(s);
          if (auto e = comm.step_boundary(); e && !e->joined.empty()) join_step[m] = s;
          if (join_step[m] >= 0 && s == join_step[m] + after_join) break;
          BPS_EXPECT(s < 3000, "no worker joined within 3000 steps");
          std::fill(p.begin(), p.end(), 1.0f);  // a delta of 1
          comm.push_pull("p", std::span(p)).wait();
          ++deltas[m];
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        comm.barrier();  // every delta of every worker is in
        std::fill(p.begin(), p.end(), 0.0f);
        comm.push_pull("p", std::span(p)).wait();
        final_params[m] = p[count - 1];
      });
    });
  std::thread newcomer([&] {
    c.guard_worker([&] {
      going.wait();
      comm_t comm(c.worker_config(-1));
      std::vector<float> step(1, -1.0f);
      comm.register_state("step", std::span(step));
      const auto e = comm.step_boundary();
      BPS_EXPECT(e && e->joined == std::vector<int>{2}, "the newcomer's first step_boundary() "
                                                       "did not report its own join");
      join_step[2] = static_cast<int>(step[0]);
      std::vector<float> p(count);
      for (int s = join_step[2]; s < join_step[2] + after_join; ++s) {
        if (s > join_step[2]) (void)comm.step_boundary();
        std::fill(p.begin(), p.end(), 1.0f);
        comm.push_pull("p", std::span(p)).wait();
        ++deltas[2];
      }
      comm.barrier();
      std::fill(p.begin(), p.end(), 0.0f);
      comm.push_pull("p", std::span(p)).wait();
      final_params[2] = p[count - 1];
    });
  });
  for (auto& t : workers) t.join();
  newcomer.join();
  c.join();
  CHECK_FALSE(c.node_error());
  REQUIRE(join_step[0] > 0);
  CHECK(join_step[1] == join_step[0]);
  CHECK(join_step[2] == join_step[0]);
  CHECK(deltas[2] == after_join);
  const float all = static_cast<float>(deltas[0] + deltas[1] + deltas[2]);
  for (int m = 0; m < 3; ++m) {
    INFO("machine " << m);
    CHECK(final_params[m] == all);  // each delta once, the newcomer's too
  }
}
