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

TEST_CASE("a worker that sends the scheduler a frame it does not take fails the job, naming both",
          "[faults][rendezvous]") {
  // A push belongs on a server link; a second hello on one connection is a replay.
  const auto [type, named] = GENERATE(table<wire::msg, const char*>({
      {wire::msg::push, "it sent a push frame, which the scheduler does not take"},
      {wire::msg::hello, "it sent a second hello on one connection"},
  }));
  cluster c(test::base_config(2, 1));
  std::promise<void> done;
  std::thread rogue([&, type = type] {
    c.guard_worker([&] {
      Config cfg = c.worker_config(1);
      transport::tcp net(cfg);
      auto link = net.connect(cfg.scheduler_host, cfg.scheduler_port, cfg.connect_timeout);
      auto inbox = std::make_shared<rendezvous::inbox>();
      link->start(inbox);
      test::say_hello(*link, *inbox, cfg);
      std::string why;
      auto welcome = inbox->take({wire::msg::welcome},
                                 std::chrono::steady_clock::now() + std::chrono::seconds(10), why);
      REQUIRE(welcome);
      wire::header h;
      h.type = type;
      h.sender = 1;
      link->send(h, {}, {});
      done.get_future().wait_for(std::chrono::seconds(30));
      net.stop();
    });
  });
  std::string error;
  std::thread w0([&] {
    c.guard_worker([&] {
      // The job may fail while this worker still joins, or once its push_pull began.
      error = test::message_of<communicator_error>([&] {
        comm_t comm(c.worker_config(0));
        std::vector<float> v(100, 1.0f);
        comm.push_pull("waits", std::span(v)).wait();
      });
    });
  });
  w0.join();
  done.set_value();
  rogue.join();
  c.join();
  CHECK_THAT(error, Contains("worker 1") && Contains(named));
}
