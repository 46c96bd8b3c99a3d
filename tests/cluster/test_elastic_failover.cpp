// Elastic training with server failover in the same job (docs/reliability.md, "Elastic
// training"): a replacement server sums over the workers still in the job, and answers from an
// offered sum with the count of workers that sum holds, not today's.
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "cluster.hpp"
#include "elastic_cluster.hpp"
#include "failover_cluster.hpp"

using namespace bps;
using namespace bps::test::elastic;

namespace {

Config elastic_failover_config(int servers) {
  Config c = elastic_config(3, 1);
  c.num_servers = servers;
  c.failover_timeout = std::chrono::seconds(10);
  return c;
}

}  // namespace

TEST_CASE("elastic with failover: a worker vanishes mid-round, then the server of its round dies - "
          "the replacement sums the 2 left, exact",
          "[elastic][failover]") {
  const Config cfg = elastic_failover_config(2);
  const int owner = server_placement(cfg).server_for(tensor_key("w"), 0);
  test::failover_cluster<transport::tcp> c(cfg, 1);
  std::promise<void> in1, pushed0, gone, replaced;
  std::shared_future<void> impostor_in = in1.get_future().share(),
                           worker0_in = pushed0.get_future().share(),
                           vanished = gone.get_future().share(),
                           standby_took = replaced.get_future().share();
  std::string lost_answer;
  std::thread lost([&] {
    c.guard_worker([&] {
      hand_made_worker w(c.worker_config(2), 2, owner);
      w.push("w", 0, 100.0f);
      lost_answer = w.answer();
      w.push("w", 1, 100.0f);  // in round 1 when it vanishes
      in1.set_value();
      worker0_in.wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      w.vanish();
      gone.set_value();
    });
  });
  float sums[2][2] = {};
  std::vector<std::thread> workers;
  for (int m = 0; m < 2; ++m)
    workers.emplace_back([&, m] {
      c.guard_worker([&] {
        const Config wc = c.worker_config(m);
        test::failover_cluster<transport::tcp>::comm_type comm(
            wc, test::transport_options<transport::tcp>(wc, nullptr));
        std::vector<float> w(count, static_cast<float>(m + 1));
        comm.push_pull("w", std::span(w)).wait();
        sums[m][0] = w[0];
        impostor_in.wait();
        std::fill(w.begin(), w.end(), static_cast<float>(m + 1));
        if (m == 0) {
          auto h = comm.push_pull("w", std::span(w));
          pushed0.set_value();
          h.wait();  // redone once, re-sent to the replacement
        } else {
          // Once the owner was replaced: the replacement hears of the removal right after its
          // welcome, so it does not wait for the vanished worker.
          standby_took.wait();
          BPS_EXPECT(c.applied_membership(owner, 1, std::chrono::seconds(10)),
                     "the replacement of server {} did not apply membership epoch 1", owner);
          comm.push_pull("w", std::span(w)).wait();
        }
        sums[m][1] = w[0];
      });
    });
  vanished.wait();
  REQUIRE(c.applied_membership(owner, 1, std::chrono::seconds(10)));
  c.kill_server(owner);
  for (int i = 0; i < 1000 && c.replacements() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(c.replacements() == 1);
  replaced.set_value();
  lost.join();
  for (auto& t : workers) t.join();
  c.join();
  if (auto e = c.worker_error()) std::rethrow_exception(e);
  CHECK_FALSE(c.scheduler_error());
  CHECK(lost_answer == "103");
  for (int m = 0; m < 2; ++m) {
    INFO("worker " << m);
    CHECK(sums[m][0] == 103.0f);
    CHECK(sums[m][1] == 3.0f);  // nothing of the vanished worker, nothing twice
  }
}

TEST_CASE("elastic with failover: a sum offered to the replacement keeps the count of workers it "
          "holds - a worker asking for it again after a removal averages it by 3, not 2",
          "[elastic][failover]") {
  const Config cfg = elastic_failover_config(1);
  test::failover_cluster<transport::tcp> c(cfg, 1);
  std::promise<void> round0, left, replaced;
  std::shared_future<void> round0_in = round0.get_future().share(),
                           machine2_left = left.get_future().share(),
                           standby_took = replaced.get_future().share();
  std::string again, next;
  std::uint32_t again_count = 0, next_count = 0;
  std::thread asker([&] {
    c.guard_worker([&] {
      hand_made_worker w(c.worker_config(1), 1, 0);
      w.push("w", 0, 2.0f);
      (void)w.answer();  // as if lost with its server: it asks the replacement again
      round0_in.wait();
      standby_took.wait();
      w.follow_replacement();
      w.push("w", 0, 2.0f);
      again = w.answer();  // round 0's sum, which worker 0 offered: it held 3 workers' pushes
      again_count = w.contributors();
      w.push("w", 1, 2.0f);
      next = w.answer();  // round 1, summed by the replacement over the 2 in the job
      next_count = w.contributors();
      w.leave();  // as a worker that is done (vanishing last would leave no worker: a failure)
    });
  });
  float averages[2] = {};
  std::thread leaver([&] {
    c.guard_worker([&] {
      const Config wc = c.worker_config(2);
      test::failover_cluster<transport::tcp>::comm_type comm(
          wc, test::transport_options<transport::tcp>(wc, nullptr));
      std::vector<float> w(count, 3.0f);
      comm.push_pull("w", std::span(w), {.average = true}).wait();
      comm.shutdown();  // leaves: its machine is removed
      left.set_value();
    });
  });
  std::thread worker0([&] {
    c.guard_worker([&] {
      const Config wc = c.worker_config(0);
      test::failover_cluster<transport::tcp>::comm_type comm(
          wc, test::transport_options<transport::tcp>(wc, nullptr));
      std::vector<float> w(count, 1.0f);
      comm.push_pull("w", std::span(w), {.average = true}).wait();
      averages[0] = w[0];
      round0.set_value();
      standby_took.wait();
      std::fill(w.begin(), w.end(), 1.0f);
      comm.push_pull("w", std::span(w), {.average = true}).wait();
      averages[1] = w[0];
    });
  });
  machine2_left.wait();
  round0_in.wait();
  REQUIRE(c.applied_membership(0, 1, std::chrono::seconds(10)));
  c.kill_server(0);
  for (int i = 0; i < 1000 && c.replacements() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(c.replacements() == 1);
  replaced.set_value();
  asker.join();
  leaver.join();
  worker0.join();
  c.join();
  if (auto e = c.worker_error()) std::rethrow_exception(e);
  CHECK_FALSE(c.scheduler_error());
  CHECK(averages[0] == 2.0f);  // (1 + 2 + 3) / 3
  CHECK(again == "6");
  CHECK(again_count == 3);  // the offered sum's own count: 2 would average it to 3.0
  CHECK(next == "3");
  CHECK(next_count == 2);
  CHECK(averages[1] == 1.5f);  // (1 + 2) / 2
}
