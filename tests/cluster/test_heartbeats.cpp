// Heartbeats: a node whose process stops (SIGSTOP, a hung host) keeps its TCP connections open;
// only silence gives it away. These tests use a node that joins, then says nothing at all.
#include <catch2/catch.hpp>
#include <atomic>
#include <future>
#include <string_view>

#include "cluster.hpp"
#include "faulty_cluster.hpp"
#include "hand_made_node.hpp"
#include "poll_until.hpp"
#include "scheduler_access.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;
using bps::test::say_hello;
using Catch::Contains;
using clock_type = std::chrono::steady_clock;

namespace {

Config fast_heartbeats(int workers, int servers) {
  auto c = test::base_config(workers, servers);
  c.heartbeat_interval = std::chrono::milliseconds(100);
  c.heartbeat_timeout = std::chrono::milliseconds(600);
  return c;
}

// Joins as worker `id` by hand (hello, welcome, peer_hello to every server), then falls silent:
// no heartbeats, no pushes, connections left open. Returns when `release` is set.
void silent_worker(Config cfg, int id, std::shared_future<void> release) {
  cfg.worker_id = id;
  transport::tcp net(cfg);
  auto control = net.connect(cfg.scheduler_host, cfg.scheduler_port, cfg.connect_timeout);
  auto inbox = std::make_shared<rendezvous::inbox>();
  control->start(inbox);
  say_hello(*control, *inbox, cfg);
  std::string why;
  auto welcome =
      inbox->take({wire::msg::welcome}, clock_type::now() + std::chrono::seconds(10), why);
  if (!welcome) throw std::runtime_error("silent worker: no welcome: " + why);
  std::vector<std::shared_ptr<transport::tcp::link>> links;
  for (const auto& a : rendezvous::decode_welcome(welcome->payload).servers) {
    links.push_back(net.connect(a.host, a.port, cfg.connect_timeout));
    rendezvous::say_peer_hello(*links.back(), std::make_shared<rendezvous::inbox>(), id, 0,
                               cfg.job_token, cfg.hello_timeout, "a server");
  }
  release.wait_for(std::chrono::seconds(30));
}

}  // namespace

TEST_CASE("a worker that falls silent fails the others' handles naming it within 2x the timeout",
          "[heartbeat]") {
  cluster c(fast_heartbeats(2, 1));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::thread silent(
      [&] { c.guard_worker([&] { silent_worker(c.worker_config(), 1, released); }); });
  std::string error;
  double took = 0;
  std::thread w0([&] {
    c.guard_worker([&] {
      comm_t comm(c.worker_config(0));
      std::vector<float> v(100, 1.0f);
      auto start = clock_type::now();
      try {
        comm.push_pull("waits", std::span(v)).wait();
      } catch (const communicator_error& e) {
        error = e.what();
      }
      took = std::chrono::duration<double>(clock_type::now() - start).count();
    });
  });
  w0.join();
  release.set_value();
  silent.join();
  c.join();
  CHECK_THAT(error, Contains("worker 1") && Contains("stopped responding") && Contains("'waits'"));
  CHECK(took < 2 * 0.6 + 0.5);
}

TEST_CASE("a node that dies while the cluster forms fails everyone who joined", "[heartbeat]") {
  // Two workers expected; the second joins, then vanishes before the server arrives.
  auto cfg = fast_heartbeats(2, 1);
  Config sc = cfg;
  sc.node_role = role::scheduler;
  sc.log = log_level::info;  // its "joined" lines, into the sink below
  std::atomic<int> joins{0};  // before the scheduler, whose log may call the sink until it is gone
  SchedulerNode<transport::tcp> scheduler(sc);
  cfg.scheduler_port = scheduler.port();
  testing::scheduler_access::log(scheduler).set_sink([&](log_level, std::string_view line) {
    if (line.find(" joined (") != std::string_view::npos) ++joins;
  });
  std::string scheduler_error;
  std::thread st([&] {
    try {
      scheduler.run();
    } catch (const communicator_error& e) {
      scheduler_error = e.what();
    }
  });
  std::string worker_error;
  bool worker0_joined = false;
  std::thread w0([&] {
    Config c = cfg;
    c.worker_id = 0;
    try {
      comm_t comm(c);
    } catch (const communicator_error& e) {
      worker_error = e.what();
    }
  });
  {
    Config c = cfg;
    c.worker_id = 1;
    transport::tcp net(c);
    // Worker 0 joins first (a sleep was not always long enough under a sanitizer). Checked
    // after the threads are joined: a REQUIRE here would leave them running.
    worker0_joined = test::poll_until([&] { return joins >= 1; }, std::chrono::seconds(30));
    // Say hello by hand (no heartbeats needed: it leaves long before the timeout).
    auto link = net.connect(c.scheduler_host, c.scheduler_port, c.connect_timeout);
    auto inbox = std::make_shared<rendezvous::inbox>();
    link->start(inbox);
    say_hello(*link, *inbox, c);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }  // net stops: the worker's connections close without a bye
  w0.join();
  st.join();
  CHECK(worker0_joined);
  CHECK_THAT(scheduler_error, Contains("worker") && Contains("while the cluster was forming"));
  CHECK_THAT(worker_error, Contains("while the cluster was forming"));
}

TEST_CASE("a server that finds the scheduler silent tells its workers so behind the answers their "
          "links still hold",
          "[heartbeat]") {
  using namespace std::chrono_literals;
  test::watchdog watchdog(std::chrono::seconds(60));
  Config cfg = test::base_config(1, 1);
  cfg.heartbeat_interval = 500ms;
  // The server finds the silence; the worker, whose timeout is far longer, could only learn of it
  // from the server's word: a worker that blames "server 0" got only the server's close.
  cfg.heartbeat_timeout = 10s;
  std::atomic<bool> silent{false};
  auto plan = std::make_shared<transport::fault_plan>();
  // The scheduler falls silent as a stopped process does: what it sends from then on is held
  // (and its links stay open while it waits for those sends, so the worker does not learn of the
  // failure through the scheduler's close either).
  plan->add({.when = {.from = role::scheduler,
                      .also = [&](const transport::outgoing_frame&) { return silent.load(); }},
             .action = transport::fault::delay(3s),
             .times = transport::fault_rule::always});
  // Every answer waits 200 ms on its way, and what the server sends after it waits behind it.
  plan->add({.when = {.type = wire::msg::pull_response, .from = role::server},
             .action = transport::fault::delay(200ms),
             .times = transport::fault_rule::always});
  Config sc = cfg;
  sc.node_role = role::scheduler;
  SchedulerNode<test::faulty_tcp> scheduler(sc, test::transport_options<test::faulty_tcp>(sc, plan));
  cfg.scheduler_port = scheduler.port();
  std::thread scheduler_thread([&] {
    try {
      scheduler.run();
    } catch (const communicator_error&) {  // the nodes it loses when they fail
    }
  });
  std::string server_error;
  std::thread server_thread([&] {
    Config c = cfg;
    c.node_role = role::server;
    c.heartbeat_timeout = 1500ms;
    try {
      Server<test::faulty_tcp> server(c, test::transport_options<test::faulty_tcp>(c, plan));
      server.run();
    } catch (const communicator_error& e) {
      server_error = e.what();
    }
  });
  std::string worker_error;
  int rounds_before = 0;
  {
    Config c = cfg;
    c.worker_id = 0;
    try {
      comm_t comm(c);
      std::vector<float> a(1000, 1.0f), b(1000, 2.0f);
      comm.push_pull("a", std::span(a)).wait();
      rounds_before = 1;
      silent = true;
      // Two answers on their way at almost every moment, until the server gives up.
      for (;;) {
        auto ha = comm.push_pull("a", std::span(a));
        auto hb = comm.push_pull("b", std::span(b));
        ha.wait();
        hb.wait();
      }
    } catch (const communicator_error& e) {
      worker_error = e.what();
    }
  }
  server_thread.join();
  scheduler_thread.join();
  CHECK(rounds_before == 1);
  CHECK_THAT(server_error, Contains("the scheduler") && Contains("stopped responding"));
  CHECK_THAT(worker_error, Contains("the scheduler") && Contains("stopped responding"));
}
