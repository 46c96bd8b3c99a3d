// A node that joined and then breaks the scheduler's protocol: its link closes as a peer's that
// sent a malformed frame does (wire::decode_error), and the job fails naming the node and the
// frame, instead of an anonymous runtime error.
#include <catch2/catch.hpp>
#include <future>

#include "cluster.hpp"
#include "hand_made_node.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;
using Catch::Contains;

namespace {

// Joins as worker 1 by hand, waits for `go`, then sends the scheduler a frame of `type` (no
// payload); stays connected until `done`.
void rogue_worker(cluster& c, wire::msg type, std::shared_future<void> go,
                  std::shared_future<void> done) {
  Config cfg = c.worker_config(1);
  transport::tcp net(cfg);
  auto link = net.connect(cfg.scheduler_host, cfg.scheduler_port, cfg.connect_timeout);
  auto inbox = std::make_shared<rendezvous::inbox>();
  link->start(inbox);
  test::say_hello(*link, *inbox, cfg);
  std::string why;
  if (!inbox->take({wire::msg::welcome},
                   std::chrono::steady_clock::now() + std::chrono::seconds(10), why))
    throw std::runtime_error("the rogue worker got no welcome: " + why);
  go.wait_for(std::chrono::seconds(30));
  wire::header h;
  h.type = type;
  h.sender = 1;
  link->send(h, {}, {});
  done.wait_for(std::chrono::seconds(30));
  net.stop();
}

}  // namespace

TEST_CASE("a worker that sends the scheduler a frame it does not take fails the job, naming both",
          "[faults][rendezvous]") {
  // A push belongs on a server link; a second hello on one connection is a replay.
  const auto [type, named] = GENERATE(table<wire::msg, const char*>({
      {wire::msg::push, "it sent a push frame, which the scheduler does not take"},
      {wire::msg::hello, "it sent a second hello on one connection"},
  }));
  cluster c(test::base_config(2, 1));
  std::promise<void> joined, done;
  std::thread rogue(
      [&, type = type, go = joined.get_future().share(), over = done.get_future().share()] {
        c.guard_worker([&] { rogue_worker(c, type, go, over); });
      });
  std::string error;
  std::thread w0([&] {
    c.guard_worker([&] {
      comm_t comm(c.worker_config(0));
      std::vector<float> v(100, 1.0f);
      auto h = comm.push_pull("waits", std::span(v));
      joined.set_value();  // only now: the failure meets an operation in flight
      error = test::message_of<communicator_error>([&] { h.wait(); });
    });
  });
  w0.join();
  done.set_value();
  rogue.join();
  c.join();
  CHECK_THAT(error, Contains("worker 1") && Contains(named) && Contains("'waits'"));
}

TEST_CASE("a job that fails while a worker connects to its servers fails that worker at once",
          "[faults][rendezvous]") {
  // The rogue breaks the protocol as soon as it is welcomed, while worker 0 may still be saying
  // hello to the server (whose challenge then never comes): worker 0 fails with the job, well
  // before its hello's own timeout, instead of crashing or waiting it out.
  auto cfg = test::base_config(2, 1);
  cfg.hello_timeout = std::chrono::seconds(10);
  cluster c(cfg);
  std::promise<void> go, done;
  go.set_value();
  std::thread rogue([&, now = go.get_future().share(), over = done.get_future().share()] {
    c.guard_worker([&] { rogue_worker(c, wire::msg::push, now, over); });
  });
  std::string error = "(no exception)";
  double took = 0;
  std::thread w0([&] {
    c.guard_worker([&] {
      const auto start = std::chrono::steady_clock::now();
      error = test::message_of<communicator_error>([&] {
        comm_t comm(c.worker_config(0));
        std::vector<float> v(100, 1.0f);
        comm.push_pull("waits", std::span(v)).wait();
      });
      took = test::seconds_since(start);
    });
  });
  w0.join();
  done.set_value();
  rogue.join();
  c.join();
  CHECK(error != "(no exception)");
  CHECK(took < 5.0);
}
