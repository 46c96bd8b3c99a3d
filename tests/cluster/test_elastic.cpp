// Elastic training (Config::elastic(), docs/reliability.md "Elastic training"): a worker machine
// lost after the cluster formed is removed, the rounds in flight start over without it, and the
// job goes on with exact sums; below BYTEPS_MIN_NUM_WORKER the job fails naming why.
#include <catch2/catch.hpp>
#include <fmt/core.h>
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

// Polls step_boundary() until the membership change shows (the scheduler's notice may come a
// moment after the sums that it caused).
std::optional<membership_event> next_change(comm_t& comm) {
  for (int i = 0; i < 500; ++i) {
    if (auto e = comm.step_boundary()) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

// Waits until server 0 (as the cluster handed it over) applied membership epoch 1.
void expect_epoch_1_applied(const std::atomic<cluster::server_type*>& server) {
  BPS_EXPECT(testing::server_access::applied_membership(*server.load(), 1,
                                                        std::chrono::seconds(10)),
             "server 0 did not apply membership epoch 1 within 10 s");
}

}  // namespace

TEST_CASE("elastic: a worker of 3 vanishes mid-round, the 2 left redo it, every sum exact",
          "[elastic]") {
  std::atomic<cluster::server_type*> server{nullptr};
  cluster c(elastic_config(3, 2), [&](cluster::server_type& s) { server = &s; });
  std::promise<void> round0_done, round1_pushed, gone;
  std::shared_future<void> round0_all = round0_done.get_future().share();
  std::shared_future<void> pushed = round1_pushed.get_future().share();
  std::shared_future<void> vanished = gone.get_future().share();
  std::string lost_answer;
  std::thread lost([&] {
    c.guard_worker([&] {
      hand_made_worker w(c.worker_config(2), 2);
      w.push("w", 0, 100.0f);
      lost_answer = w.answer();  // round 0 counts it: 1 + 2 + 100
      round0_done.set_value();
      w.push("w", 1, 100.0f);  // admitted into round 1, then gone before it completes
      round1_pushed.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      w.vanish();
      gone.set_value();
    });
  });
  float sums[2][3] = {};
  std::optional<membership_event> seen[2];
  int size_after[2] = {};
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> w(count, static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w)).wait();
        sums[m][0] = w[count - 1];
        round0_all.wait();
        // Worker 0 pushes round 1 while the hand-made worker's push is in: the server must
        // discard both and ask worker 0 again. Worker 1 pushes once it is gone.
        if (m == 0) pushed.wait();
        if (m == 1) {
          // Once the server started its rounds over without worker 2: before, this push
          // would complete round 1 with worker 2's push in it, as it should (the round was
          // not over when it died, but it was whole).
          vanished.wait();
          expect_epoch_1_applied(server);
        }
        std::fill(w.begin(), w.end(), static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w)).wait();
        sums[m][1] = w[0];
        seen[m] = next_change(comm);
        size_after[m] = comm.size();
        std::fill(w.begin(), w.end(), static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w), {.average = true}).wait();
        sums[m][2] = w[count / 2];
      });
    });
  lost.join();
  for (auto& t : workers) t.join();
  c.join();
  CHECK_FALSE(c.node_error());  // the scheduler and the server went on
  CHECK(lost_answer == "103");
  for (int m = 0; m < 2; ++m) {
    INFO("worker " << m);
    CHECK(sums[m][0] == 103.0f);
    CHECK(sums[m][1] == 3.0f);   // nothing of the vanished worker, nothing twice
    CHECK(sums[m][2] == 1.5f);   // averaged by the 2 that contributed
    REQUIRE(seen[m].has_value());
    CHECK(seen[m]->epoch == 1);
    CHECK(seen[m]->old_size == 3);
    CHECK(seen[m]->size == 2);
    CHECK(seen[m]->rank == m);
    CHECK(seen[m]->removed == std::vector<int>{2});
    CHECK_THAT(seen[m]->why, Contains("disconnected"));
    CHECK(size_after[m] == 2);
  }
}

TEST_CASE("elastic: a broadcast whose root vanishes mid-round fails by name on the others - "
          "not zeros - and the next broadcast from a live root is exact",
          "[elastic]") {
  std::atomic<cluster::server_type*> server{nullptr};
  cluster c(elastic_config(3, 2), [&](cluster::server_type& s) { server = &s; });
  std::promise<void> round0_done, round1_pushed, gone;
  std::shared_future<void> round0_all = round0_done.get_future().share();
  std::shared_future<void> pushed = round1_pushed.get_future().share();
  std::shared_future<void> vanished = gone.get_future().share();
  std::string root_answer;
  std::thread root([&] {
    c.guard_worker([&] {
      hand_made_worker w(c.worker_config(2), 2);  // rank 2, the root of "b"
      w.push("broadcast:b", 0, 7.0f);
      root_answer = w.answer();
      round0_done.set_value();
      w.push("broadcast:b", 1, 8.0f);  // its data of round 1, then gone before it completes
      round1_pushed.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      w.vanish();
      gone.set_value();
    });
  });
  float got[2][2] = {};
  std::string failed[2];
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> b(count, static_cast<float>(m + 1));
        comm.broadcast("b", std::span(b), 2).wait();
        got[m][0] = b[count - 1];
        round0_all.wait();
        if (m == 0) pushed.wait();  // its push joins the root's in round 1
        if (m == 1) {               // its push comes after the round started over without it
          vanished.wait();
          expect_epoch_1_applied(server);
        }
        std::fill(b.begin(), b.end(), static_cast<float>(m + 1));
        try {
          comm.broadcast("b", std::span(b), 2).wait();
          // Not expected: what it gave tells the root's data (8) from zeros.
          failed[m] = fmt::format("no error: the broadcast gave {}", b[count - 1]);
        } catch (const usage_error& e) {
          failed[m] = e.what();
        }
        BPS_EXPECT(next_change(comm).has_value(), "worker did not see the root's removal");
        std::fill(b.begin(), b.end(), static_cast<float>(10 * (m + 1)));
        comm.broadcast("b", std::span(b), 0).wait();
        got[m][1] = b[count / 2];
      });
    });
  root.join();
  for (auto& t : workers) t.join();
  c.join();
  CHECK_FALSE(c.node_error());  // the scheduler and the server went on
  CHECK(root_answer == "7");
  for (int m = 0; m < 2; ++m) {
    INFO("worker " << m);
    CHECK(got[m][0] == 7.0f);
    CHECK_THAT(failed[m], Contains("broadcast of 'b' from rank 2") &&
                              Contains("its root's machine was removed from the job"));
    CHECK(got[m][1] == 10.0f);  // rank 0's data, exact
  }
}

TEST_CASE("elastic: every worker sees a removal at the same step boundary, however early its "
          "notice reached each",
          "[elastic]") {
  std::atomic<cluster::server_type*> server{nullptr};
  cluster c(elastic_config(3, 2), [&](cluster::server_type& s) { server = &s; });
  std::promise<void> round0_done, worker1_passed, gone;
  std::shared_future<void> round0_all = round0_done.get_future().share();
  std::shared_future<void> passed = worker1_passed.get_future().share();
  std::shared_future<void> vanished = gone.get_future().share();
  std::thread lost([&] {
    c.guard_worker([&] {
      hand_made_worker w(c.worker_config(2), 2);
      w.push("w", 0, 100.0f);
      (void)w.answer();
      round0_done.set_value();
      passed.wait();  // worker 1 passed boundary 1 before anyone heard of the removal
      w.vanish();
      gone.set_value();
    });
  });
  int seen_at[2] = {-1, -1};
  std::optional<membership_event> seen[2];
  float sums[2] = {};
  std::atomic<int> looked{0};  // neither leaves (a removal of its own) before the other looked
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> w(count, static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w)).wait();
        round0_all.wait();
        if (m == 1) {
          BPS_EXPECT(!comm.step_boundary(), "worker 1 saw a change at boundary 1");
          worker1_passed.set_value();
        } else {
          // Worker 0 reaches boundary 1 long after its notice came: shown at once, it would
          // see the removal a step before worker 1.
          vanished.wait();
          expect_epoch_1_applied(server);
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          if (auto e = comm.step_boundary()) {
            seen_at[m] = 1;
            seen[m] = e;
          }
        }
        for (int boundary = 2; boundary <= 4 && !seen[m]; ++boundary) {
          std::fill(w.begin(), w.end(), static_cast<float>(m + 1));
          comm.push_pull("w", std::span(w)).wait();
          sums[m] = w[0];
          if (auto e = comm.step_boundary()) {
            seen_at[m] = boundary;
            seen[m] = e;
          }
        }
        ++looked;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (looked < 2 && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
      });
    });
  lost.join();
  for (auto& t : workers) t.join();
  c.join();
  CHECK_FALSE(c.node_error());
  CHECK(seen_at[0] == 2);  // the boundary after worker 1's report of 1
  CHECK(seen_at[1] == 2);
  for (int m = 0; m < 2; ++m) {
    INFO("worker " << m);
    CHECK(sums[m] == 3.0f);
    REQUIRE(seen[m].has_value());
    CHECK(seen[m]->epoch == 1);
    CHECK(seen[m]->old_size == 3);
    CHECK(seen[m]->size == 2);
    CHECK(seen[m]->removed == std::vector<int>{2});
  }
}

TEST_CASE("elastic: below BYTEPS_MIN_NUM_WORKER the job fails naming the worker and the minimum",
          "[elastic]") {
  cluster c(elastic_config(3, 3));
  std::promise<void> gone;
  std::shared_future<void> vanished = gone.get_future().share();
  std::thread lost([&] {
    c.guard_worker([&] {
      hand_made_worker w(c.worker_config(2), 2);
      w.vanish();
      gone.set_value();
    });
  });
  std::string errors[2];
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      // The failure may come while the worker still connects to the servers, or later.
      errors[m] = test::message_of<communicator_error>([&] {
        comm_t comm(c.worker_config(m));
        vanished.wait();
        std::vector<float> w(count, 1.0f);
        comm.push_pull("w", std::span(w)).wait();
      });
    });
  lost.join();
  for (auto& t : workers) t.join();
  c.join();
  for (const auto& e : errors)
    CHECK_THAT(e, Contains("worker 2") && Contains("2 worker machines remain") &&
                      Contains("BYTEPS_MIN_NUM_WORKER=3"));
}

TEST_CASE("elastic: a worker that leaves with bye mid-job is removed, and the others go on",
          "[elastic]") {
  cluster c(elastic_config(3, 3));  // a leave is never below the minimum: nobody failed
  std::promise<void> left;
  std::shared_future<void> gone = left.get_future().share();
  float sums[2] = {};
  std::vector<std::thread> workers;
  for (int m = 0; m < 3; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> w(count, static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w)).wait();
        if (m == 2) {
          comm.shutdown();
          left.set_value();
          return;
        }
        gone.wait();
        std::fill(w.begin(), w.end(), static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w), {.average = true}).wait();
        sums[m] = w[0];
      });
    });
  for (auto& t : workers) t.join();
  c.join();
  CHECK_FALSE(c.node_error());
  CHECK(sums[0] == 1.5f);
  CHECK(sums[1] == 1.5f);
}

TEST_CASE("elastic: a worker that falls silent is removed after the heartbeat timeout, and the "
          "round it held up completes without it - 2 servers, 10 partitions and a fused tensor",
          "[elastic]") {
  Config cfg = elastic_config(3, 2);
  cfg.num_servers = 2;
  cfg.partition_bytes = 4096;
  cfg.fusion_bytes = 65536;
  cfg.heartbeat_interval = std::chrono::milliseconds(100);
  cfg.heartbeat_timeout = std::chrono::milliseconds(1000);
  constexpr std::size_t big = 10240, small = 100;  // 10 partitions; one fused push
  // Worker 2's every frame is dropped from the moment the rule is added: its heartbeats too.
  auto silence = std::make_shared<transport::fault_plan>();
  std::promise<void> silent;
  std::shared_future<void> gone_quiet = silent.get_future().share();
  float sums[3][2][2] = {};
  std::string silenced_error;
  double waited[2] = {};  // by worker left
  cluster c(cfg);
  c.run_local<test::faulty_comm_t>(
      {1, 1, 1},
      [&](test::faulty_comm_t& comm) {
        const int m = comm.machine();
        std::vector<float> a(big), b(small);
        auto round = [&](int r) {
          std::fill(a.begin(), a.end(), static_cast<float>(m + 1));
          std::fill(b.begin(), b.end(), static_cast<float>(10 * (m + 1)));
          auto ha = comm.push_pull("a", std::span(a));
          auto hb = comm.push_pull("b", std::span(b));
          ha.wait();
          hb.wait();
          sums[m][r][0] = a[big - 1];
          sums[m][r][1] = b[0];
        };
        round(0);
        if (m == 2) {
          silence->add({.action = transport::fault::drop(),
                        .times = transport::fault_rule::always});
          silent.set_value();
          silenced_error = test::message_of<communicator_error>([&] { round(1); });
          return;
        }
        gone_quiet.wait();
        const auto began = std::chrono::steady_clock::now();
        round(1);
        waited[m] = test::seconds_since(began);
      },
      true,
      [&](const Config& wc) {
        auto plan = wc.worker_id == 2 ? silence : std::make_shared<transport::fault_plan>();
        return std::make_unique<test::faulty_comm_t>(
            wc, test::transport_options<test::faulty_tcp>(wc, plan));
      });
  CHECK_FALSE(c.node_error());
  for (int m = 0; m < 3; ++m) {
    INFO("worker " << m);
    CHECK(sums[m][0][0] == 6.0f);
    CHECK(sums[m][0][1] == 60.0f);
  }
  for (int m = 0; m < 2; ++m) {
    INFO("worker " << m);
    CHECK(sums[m][1][0] == 3.0f);
    CHECK(sums[m][1][1] == 30.0f);
  }
  for (double w : waited) {
    CHECK(w >= 0.9);  // held up until the scheduler gave up on worker 2, not before
    CHECK(w < 10.0);
  }
  // It hears why from whichever tells it first: a server or the scheduler's closed link.
  CHECK_THAT(silenced_error, Contains("removed from the job") || Contains("scheduler"));
}

TEST_CASE("elastic: compressed (fp16, decoded by the servers) - a worker whose push is in "
          "vanishes, the 2 left redo the round, the sums are exact",
          "[elastic]") {
  Config cfg = elastic_config(3, 2);
  cfg.num_servers = 2;
  cfg.partition_bytes = 4096;
  cfg.min_compress_bytes = 0;
  cfg.compressor = "fp16";
  cfg.heartbeat_interval = std::chrono::milliseconds(100);
  cfg.heartbeat_timeout = std::chrono::milliseconds(1000);
  constexpr std::size_t big = 10240;  // 10 partitions on 2 servers
  auto silence = std::make_shared<transport::fault_plan>();
  std::promise<void> silent;
  std::shared_future<void> gone_quiet = silent.get_future().share();
  std::atomic<cluster::server_type*> servers[2] = {nullptr, nullptr};
  float sums[3][2] = {};
  cluster c(cfg, [&](cluster::server_type& s) {
    servers[s.rank()] = &s;
  });
  c.run_local<test::faulty_comm_t>(
      {1, 1, 1},
      [&](test::faulty_comm_t& comm) {
        const int m = comm.machine();
        std::vector<float> a(big);
        auto push = [&] {
          std::fill(a.begin(), a.end(), static_cast<float>(m + 1));
          return comm.push_pull("a", std::span(a), {.average = true});
        };
        push().wait();
        sums[m][0] = a[big - 1];
        if (m == 2) {
          // Its push of round 1 goes out; then it falls silent, the round still open.
          auto h = push();
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          silence->add({.action = transport::fault::drop(),
                        .times = transport::fault_rule::always});
          silent.set_value();
          (void)test::message_of<communicator_error>([&] { h.wait(); });
          return;
        }
        gone_quiet.wait();
        if (m == 1)  // only once both servers started round 1 over without worker 2
          for (auto& s : servers)
            BPS_EXPECT(testing::server_access::applied_membership(*s.load(), 1,
                                                                  std::chrono::seconds(10)),
                       "a server did not apply membership epoch 1 within 10 s");
        push().wait();
        sums[m][1] = a[0];
      },
      true,
      [&](const Config& wc) {
        auto plan = wc.worker_id == 2 ? silence : std::make_shared<transport::fault_plan>();
        return std::make_unique<test::faulty_comm_t>(
            wc, test::transport_options<test::faulty_tcp>(wc, plan));
      });
  CHECK_FALSE(c.node_error());
  for (int m = 0; m < 3; ++m) CHECK(sums[m][0] == 2.0f);  // (1 + 2 + 3) / 3
  CHECK(sums[0][1] == 1.5f);  // (1 + 2) / 2: nothing of worker 2's push
  CHECK(sums[1][1] == 1.5f);
}

TEST_CASE("elastic: a worker that leaves after a failure of its own still fails the job, naming "
          "it, once the scheduler saw it was not removed",
          "[elastic]") {
  Config cfg = elastic_config(3, 2);
  cfg.heartbeat_interval = std::chrono::milliseconds(100);
  cfg.heartbeat_timeout = std::chrono::milliseconds(1000);
  cluster c(cfg);
  std::promise<void> left;
  std::shared_future<void> gone = left.get_future().share();
  std::string errors[2];
  std::vector<std::thread> workers;
  for (int m = 0; m < 3; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        comm_t comm(c.worker_config(m));
        std::vector<float> w(count, 1.0f);
        comm.push_pull("w", std::span(w)).wait();
        if (m == 2) {
          comm.shutdown("its trainer threw: out of data");
          left.set_value();
          return;
        }
        gone.wait();
        errors[m] = test::message_of<communicator_error>(
            [&] { comm.push_pull("w", std::span(w)).wait(); });
      });
    });
  for (auto& t : workers) t.join();
  c.join();
  for (const auto& e : errors)
    CHECK_THAT(e, Contains("worker 2") && Contains("left after a failure") &&
                      Contains("its trainer threw: out of data"));
}
