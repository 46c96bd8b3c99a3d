// Faults injected by transport::faulty<tcp> into real clusters: each must end in the exact sum or
// in a named error within a bounded time, never in a hang. The decorator itself is checked on
// bare links in test_faulty_links.cpp.
#include "faulty_cluster.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <future>

using namespace bps;
using namespace std::chrono_literals;
using bps::test::faulty_cluster;
using bps::test::faulty_comm_t;
using bps::test::faulty_tcp;
using bps::transport::fault;
using bps::transport::fault_plan;
using bps::transport::fault_rule;
using Catch::Contains;
using clock_type = std::chrono::steady_clock;
using bps::test::message_of;
using bps::test::seconds_since;

namespace {

Config quick_config(int workers, int servers) {
  Config c = test::base_config(workers, servers);
  c.connect_timeout = 5s;
  c.rendezvous_timeout = 10s;
  c.op_timeout = 20s;
  // The rules here match push frames; tensor fusion would carry small pushes inside push_batch
  // frames, which test_fusion.cpp's fault test targets instead.
  c.fusion_bytes = 0;
  return c;
}

}  // namespace

TEST_CASE("a delayed push still gives the exact sum", "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto push = plan->add({.when = {.type = wire::msg::push, .sender = 0, .part = 1},
                         .action = fault::delay(300ms),
                         .times = fault_rule::always});
  // A delayed declare holds back the pushes behind it on that link.
  auto declare = plan->add({.when = {.type = wire::msg::declare, .sender = 1},
                            .action = fault::delay(200ms),
                            .times = fault_rule::always});
  Config cfg = quick_config(2, 2);
  cfg.partition_bytes = 4096;  // 5000 floats: 5 partitions over both servers
  faulty_cluster c(cfg, plan);
  double first_round = 0;
  c.run_workers([&](faulty_comm_t& comm, int rank) {
    std::vector<float> v(5000);
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<float>(i % 97) * 0.25f + static_cast<float>(rank + round) + 0.125f;
      auto start = clock_type::now();
      comm.push_pull("delayed", std::span(v)).wait();
      if (rank == 0 && round == 0) first_round = seconds_since(start);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const float expected =
            static_cast<float>(i % 97) * 0.5f + static_cast<float>(1 + 2 * round) + 0.25f;
        BPS_EXPECT(v[i] == expected, "round {} element {}: {} != {}", round, i, v[i], expected);
      }
    }
  });
  CHECK(plan->fired(push) == 3);
  CHECK(plan->fired(declare) >= 1);
  CHECK(first_round >= 0.29);
}

TEST_CASE("a duplicated push is refused by the server and fails that handle naming the tensor",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto dup =
      plan->add({.when = {.type = wire::msg::push, .sender = 0}, .action = fault::duplicate()});
  faulty_cluster c(quick_config(2, 1), plan);
  std::promise<void> refused;
  auto refused_seen = refused.get_future().share();
  std::string error;
  c.run_workers([&](faulty_comm_t& comm, int rank) {
    std::vector<float> v(10, 1.0f);
    if (rank == 0) {
      error = message_of<usage_error>([&] { comm.push_pull("dup", std::span(v)).wait(); });
      refused.set_value();
    } else {
      refused_seen.wait();  // push only after the duplicate was refused: the round is still open
      comm.push_pull("dup", std::span(v)).wait();
      BPS_EXPECT(v[0] == 2.0f, "got {}", v[0]);
    }
    comm.barrier();
    // A usage error leaves the communicator usable: the next round works on both.
    std::fill(v.begin(), v.end(), static_cast<float>(rank + 1));
    comm.push_pull("dup", std::span(v)).wait();
    BPS_EXPECT(v[9] == 3.0f, "got {}", v[9]);
  });
  CHECK(plan->fired(dup) == 1);
  CHECK_THAT(error, Contains("push_pull of 'dup'") && Contains("pushed 'dup' partition 0 twice") &&
                        Contains("worker 0"));
}

TEST_CASE("a corrupted header makes the server drop the worker, whose pending handles fail fast",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  // The last of worker 0's three pushes is spoiled, so that all three handles exist when the
  // server drops the link (corrupting the first could kill the communicator before the later
  // push_pull calls, which would then throw at the call).
  plan->add({.when = {.type = wire::msg::push, .sender = 0, .key = tensor_key("d")},
             .action = fault::corrupt_header()});
  faulty_cluster c(quick_config(2, 1), plan);  // op_timeout 20 s: the failure is no timeout
  std::vector<std::string> errors;
  std::string other;
  double took = 0;
  // Worker 0 stays in the job until worker 1 has asked: a dead communicator's bye says what
  // killed it ("lost server 0"), so once worker 0 left, the scheduler would fail the job with
  // that, and which of the two reasons reached worker 1 first would be a race. Every wait is bounded and every promise is kept on
  // the way out, whatever happens: a broken test fails, never hangs.
  struct keep_on_exit {
    std::promise<void>& p;
    ~keep_on_exit() { p.set_value(); }
  };
  std::promise<void> failed, asked;
  auto failed_seen = failed.get_future().share();
  auto asked_seen = asked.get_future().share();
  c.run_workers(
      [&](faulty_comm_t& comm, int rank) {
        std::vector<float> a(100, 1.0f), b(100, 1.0f), d(100, 1.0f);
        if (rank == 0) {
          {
            keep_on_exit release{failed};
            auto start = clock_type::now();
            std::vector<handle> hs{comm.push_pull("a", std::span(a)),
                                   comm.push_pull("b", std::span(b)),
                                   comm.push_pull("d", std::span(d))};
            for (auto& h : hs) errors.push_back(message_of<communicator_error>([&] { h.wait(); }));
            took = seconds_since(start);
          }
          asked_seen.wait_for(std::chrono::seconds(30));
        } else {
          keep_on_exit release{asked};
          failed_seen.wait_for(std::chrono::seconds(30));
          // The server refused worker 0's frame and dropped it: it tells the others why.
          other = message_of<communicator_error>([&] { comm.push_pull("a", std::span(a)).wait(); });
        }
      },
      /*strict=*/false);
  REQUIRE(errors.size() == 3);
  CHECK_THAT(errors[0], Contains("'a'") && Contains("lost server 0"));
  CHECK_THAT(errors[1], Contains("'b'") && Contains("lost server 0"));
  CHECK_THAT(errors[2], Contains("'d'") && Contains("lost server 0"));
  CHECK(took < 5.0);
  CHECK_THAT(other,
             Contains("server 0") && Contains("worker 0") && Contains("unknown message type"));
}

TEST_CASE("a link cut mid push_pull fails the pending handles naming the server",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto cut =
      plan->add({.when = {.type = wire::msg::push, .from = role::worker, .sender = 0, .part = 2},
                 .action = fault::cut()});
  Config cfg = quick_config(2, 1);
  cfg.partition_bytes = 4096;
  faulty_cluster c(cfg, plan);
  std::string error, small, other;
  double took = 0;
  c.run_workers(
      [&](faulty_comm_t& comm, int rank) {
        std::vector<float> big(5000, 1.0f), tiny(4, 1.0f);
        auto start = clock_type::now();
        if (rank == 0) {
          // 'tiny' first, and worker 1 never pushes it: both are pending when the cut comes
          // (a push_pull called after the link died would throw at the call instead).
          auto h2 = comm.push_pull("tiny", std::span(tiny));
          auto h1 = comm.push_pull("big", std::span(big));
          error = message_of<communicator_error>([&] { h1.wait(); });
          small = message_of<communicator_error>([&] { h2.wait(); });
          took = seconds_since(start);
        } else {
          // The server lost worker 0: what worker 1 still waits for fails too.
          other = message_of<bps::error>([&] { comm.push_pull("big", std::span(big)).wait(); });
        }
      },
      /*strict=*/false);
  CHECK(plan->fired(cut) == 1);
  CHECK_THAT(error, Contains("push_pull of 'big'") && Contains("lost server 0 at 127.0.0.1:"));
  CHECK_THAT(small, Contains("'tiny'") && Contains("lost server 0"));
  CHECK(took < 5.0);
  CHECK_THAT(other, Contains("worker 0"));
}

TEST_CASE("a link the server cuts fails the worker's handle naming the server",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  plan->add(
      {.when = {.type = wire::msg::pull_response, .from = role::server}, .action = fault::cut()});
  faulty_cluster c(quick_config(1, 1), plan);
  std::string error;
  c.run_workers(
      [&](faulty_comm_t& comm, int) {
        std::vector<double> v(64, 1.0);
        error =
            message_of<communicator_error>([&] { comm.push_pull("answer", std::span(v)).wait(); });
      },
      /*strict=*/false);
  CHECK_THAT(error, Contains("'answer'") && Contains("lost server 0 at 127.0.0.1:"));
}

TEST_CASE("a dropped push fails the handle at its deadline naming the server",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto drop = plan->add({.when = {.type = wire::msg::push, .sender = 0}, .action = fault::drop()});
  Config cfg = quick_config(2, 1);
  cfg.op_timeout = 1000ms;
  faulty_cluster c(cfg, plan);
  std::string error, other;
  double took = 0;
  std::atomic<bool> done{false};
  c.run_workers(
      [&](faulty_comm_t& comm, int rank) {
        std::vector<float> v(10, 1.0f);
        auto start = clock_type::now();
        if (rank == 0) {
          error =
              message_of<communicator_error>([&] { comm.push_pull("lost", std::span(v)).wait(); });
          took = seconds_since(start);
          done = true;
        } else {
          other =
              message_of<communicator_error>([&] { comm.push_pull("lost", std::span(v)).wait(); });
          // A dead worker leaves without a bye, and the scheduler then fails the job: stay until
          // worker 0 has met its own deadline, which is what this test checks.
          while (!done) std::this_thread::sleep_for(10ms);
        }
      },
      /*strict=*/false);
  CHECK(plan->fired(drop) == 1);
  CHECK_THAT(error, Contains("push_pull of 'lost'") && Contains("1000 ms") &&
                        Contains("1 partition(s) from server 0 at 127.0.0.1:"));
  CHECK(took >= 0.9);
  CHECK(took < 5.0);
  CHECK_THAT(other, Contains("'lost'"));
}

TEST_CASE("a corrupted hello is refused at rendezvous naming the protocol", "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  plan->add({.when = {.type = wire::msg::hello, .from = role::worker},
             .action = fault::corrupt_payload(0)});
  faulty_cluster c(quick_config(1, 1), plan);
  auto m = message_of<usage_error>([&] { c.make_worker(); });
  const auto flipped = std::to_string(rendezvous::protocol_version ^ 0xffu);  // byte 0 inverted
  CHECK_THAT(m, Contains("refused") && Contains("protocol differs") && Contains(flipped));
  c.run_workers([](faulty_comm_t& comm, int) {  // the rule acted once: a worker joins now
    std::vector<std::int32_t> v(3, 5);
    comm.push_pull("after", std::span(v)).wait();
    BPS_EXPECT(v[1] == 5, "got {}", v[1]);
  });
}
