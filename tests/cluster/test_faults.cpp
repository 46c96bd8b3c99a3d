// Bad input and faults: every case must end in a named error within a bounded time, never a hang.
#include <asio.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <future>

#include "cluster.hpp"
#include "faulty_cluster.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;
using Catch::Contains;
using clock_type = std::chrono::steady_clock;
using bps::test::message_of;
using bps::test::seconds_since;

namespace {

// Sends `bytes` to host:port and reports whether the peer closed the connection within 5 s.
bool peer_hangs_up_on(std::uint16_t port, const std::vector<std::byte>& bytes) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(s, asio::buffer(bytes.data(), bytes.size()));
  std::array<char, 256> sink;
  std::error_code ec;
  std::atomic<bool> closed{false};
  std::thread reader([&] {
    while (!ec) s.read_some(asio::buffer(sink), ec);
    closed = true;
  });
  for (int i = 0; i < 500 && !closed; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!closed) s.shutdown(asio::ip::tcp::socket::shutdown_both);
  reader.join();
  return ec == asio::error::eof || ec == asio::error::connection_reset;
}

std::vector<std::byte> text_frame(const std::string& s) {
  std::vector<std::byte> b(wire::header_size, std::byte{' '});
  std::memcpy(b.data(), s.data(), std::min(s.size(), b.size()));
  return b;
}

}  // namespace

TEST_CASE("a tensor pushed with different sizes fails on every worker naming both shapes",
          "[faults]") {
  cluster c(test::base_config(2, 1));
  std::string errors[2];
  c.run_workers([&](comm_t& comm, int rank) {
    std::vector<float> v(rank == 0 ? 10 : 20, 1.0f);
    errors[rank] = message_of<usage_error>([&] { comm.push_pull("w", std::span(v)).wait(); });
    // The communicator stays usable for correct calls.
    std::vector<float> ok(5, 1.0f);
    comm.push_pull("fine", std::span(ok)).wait();
    BPS_EXPECT(ok[0] == 2.0f, "got {}", ok[0]);
  });
  for (auto& e : errors) {
    CHECK_THAT(e, Contains("'w'") && Contains("10 x float32") && Contains("20 x float32"));
  }
}

TEST_CASE("a tensor pushed with different dtypes fails on every worker", "[faults]") {
  cluster c(test::base_config(2, 2));
  std::string errors[2];
  c.run_workers([&](comm_t& comm, int rank) {
    std::vector<std::int32_t> a(64, 1);
    std::vector<float> b(64, 1.0f);
    errors[rank] = message_of<usage_error>([&] {
      if (rank == 0)
        comm.push_pull("mixed", std::span(a)).wait();
      else
        comm.push_pull("mixed", std::span(b)).wait();
    });
  });
  for (auto& e : errors)
    CHECK_THAT(e, Contains("'mixed'") && Contains("int32") && Contains("float32"));
}

TEST_CASE("misuse fails at the call with a clear usage_error", "[faults]") {
  cluster c(test::base_config(1, 1));
  std::vector<std::string> m;
  c.run_workers([&](comm_t& comm, int) {
    std::vector<int> v(8, 1);
    std::vector<int> w(9, 1);
    m.push_back(message_of<usage_error>([&] { comm.push_pull("", std::span(v)); }));
    m.push_back(
        message_of<usage_error>([&] { comm.push_pull("ints", std::span(v), {.average = true}); }));
    m.push_back(message_of<usage_error>([&] { comm.broadcast("b", std::span(v), 3); }));
    comm.push_pull("ints", std::span(v)).wait();
    m.push_back(message_of<usage_error>([&] { comm.push_pull("ints", std::span(w)); }));
    m.push_back(
        message_of<usage_error>([&] { comm.push_pull("null", nullptr, 4, dtype::float32); }));
    m.push_back(message_of<usage_error>(
        [&] { comm.push_pull("odd", v.data(), 8, static_cast<dtype>(42)); }));
    comm.shutdown();
    m.push_back(message_of<usage_error>([&] { comm.push_pull("ints", std::span(v)); }));
    m.push_back(message_of<usage_error>([&] { comm.barrier(); }));
  });
  CHECK_THAT(m[0], Contains("name is empty"));
  CHECK_THAT(m[1], Contains("floating dtypes only") && Contains("int32"));
  CHECK_THAT(m[2], Contains("root 3 is outside the group of 1"));
  CHECK_THAT(m[3], Contains("'ints'") && Contains("8 x int32") && Contains("9 x int32"));
  CHECK_THAT(m[4], Contains("null"));
  CHECK_THAT(m[5], Contains("dtype value 42"));
  CHECK_THAT(m[6], Contains("shut down"));
  CHECK_THAT(m[7], Contains("shut down"));
}

TEST_CASE("a push_pull while the previous one on the tensor is in flight is refused", "[faults]") {
  cluster c(test::base_config(2, 1));
  std::string error;
  c.run_workers([&](comm_t& comm, int rank) {
    std::vector<float> v(16, 1.0f);
    if (rank == 0) {
      auto h = comm.push_pull("busy", std::span(v));
      error = message_of<usage_error>([&] { comm.push_pull("busy", std::span(v)); });
      comm.barrier();
      h.wait();
    } else {
      comm.barrier();
      comm.push_pull("busy", std::span(v)).wait();
    }
  });
  CHECK_THAT(error, Contains("still in flight"));
}

TEST_CASE("a worker whose settings differ is refused naming the variable", "[faults]") {
  cluster c(test::base_config(1, 1));
  auto bad = c.worker_config();
  bad.partition_bytes = 8192;
  auto m = message_of<usage_error>([&] { comm_t comm(bad); });
  CHECK_THAT(m, Contains("BYTEPS_PARTITION_BYTES") && Contains("8192") &&
                    Contains("the scheduler has 0 (auto)"));
  c.run_workers([](comm_t& comm, int) {  // the job goes on with a correct worker
    std::vector<float> v(3, 2.0f);
    comm.push_pull("x", std::span(v)).wait();
    BPS_EXPECT(v[2] == 2.0f, "got {}", v[2]);
  });
}

TEST_CASE("an unreachable scheduler fails within the connect timeout", "[faults]") {
  Config cfg = test::base_config(1, 1);
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  cfg.scheduler_port = a.local_endpoint().port();
  a.close();  // nobody listens there now
  cfg.connect_timeout = std::chrono::milliseconds(500);
  auto start = clock_type::now();
  auto m = message_of<communicator_error>([&] { comm_t comm(cfg); });
  CHECK(seconds_since(start) < 5.0);
  CHECK_THAT(m, Contains("cannot reach the scheduler") && Contains("DMLC_PS_ROOT_PORT"));
}

TEST_CASE("a scheduler that stops right after reading a node's hello is noticed within the "
          "heartbeat timeout, not the connect timeout",
          "[faults][rendezvous]") {
  using namespace std::chrono_literals;
  Config base = test::base_config(2, 1);  // one worker comes: the cluster never forms
  base.heartbeat_interval = 100ms;
  base.heartbeat_timeout = 600ms;
  base.connect_timeout = 10s;
  base.rendezvous_timeout = 20s;
  // After its challenge and the one frame behind it the scheduler says nothing more, and never
  // answers a clock probe: as if it stopped (SIGSTOP) between reading the hello and the probe.
  auto plan = std::make_shared<transport::fault_plan>();
  plan->add({.when = {.from = role::scheduler,
                      .also =
                          [](const transport::outgoing_frame& f) {
                            return f.index >= 2 || (f.header.type == wire::msg::heartbeat &&
                                                    f.header.round != 0);
                          }},
             .action = transport::fault::drop(),
             .times = transport::fault_rule::always});
  Config sc = base;
  sc.node_role = role::scheduler;
  SchedulerNode<test::faulty_tcp> scheduler(sc, test::transport_options<test::faulty_tcp>(sc, plan));
  base.scheduler_port = scheduler.port();
  std::thread scheduler_thread([&] {
    try {
      scheduler.run();
    } catch (const std::exception&) {  // the worker it lost, or the rendezvous timeout
    }
  });
  Config wc = base;
  wc.worker_id = 0;
  auto start = clock_type::now();
  auto m = message_of<communicator_error>([&] { comm_t comm(wc); });
  const double took = seconds_since(start);
  scheduler_thread.join();
  CHECK_THAT(m, Contains("the scheduler") && Contains("stopped responding"));
  CHECK(took < 5.0);  // the heartbeat timeout (0.6 s) and slack; the connect timeout is 10 s
}

TEST_CASE("a malformed or foreign frame drops that connection only", "[faults]") {
  cluster c(test::base_config(2, 1));
  CHECK(peer_hangs_up_on(c.scheduler_port(), text_frame("GET / HTTP/1.1\r\nHost: x\r\n\r\n")));
  bool server_hung_up = false, huge_hung_up = false;
  c.run_workers([&](comm_t& comm, int rank) {
    if (rank == 0) {
      server_hung_up = peer_hangs_up_on(c.server_port(0), text_frame("SSH-2.0-OpenSSH_9.2\r\n"));
      wire::header h;
      h.type = wire::msg::push;
      h.payload_bytes = std::uint64_t{1} << 40;  // must be refused before anything is allocated
      auto b = wire::encode(h);
      huge_hung_up = peer_hangs_up_on(c.server_port(0), {b.begin(), b.end()});
    }
    comm.barrier();
    std::vector<std::int64_t> v(1000, rank + 1);
    comm.push_pull("after", std::span(v)).wait();
    BPS_EXPECT(v[999] == 3, "got {}", v[999]);
  });
  CHECK(server_hung_up);
  CHECK(huge_hung_up);
}

TEST_CASE("a server that dies fails every pending handle naming it, quickly", "[faults]") {
  Config base = test::base_config(2, 1);
  Config sc = base;
  sc.node_role = role::scheduler;
  SchedulerNode<transport::tcp> scheduler(sc);
  base.scheduler_port = scheduler.port();
  std::thread scheduler_thread([&] {
    try {
      scheduler.run();
    } catch (const communicator_error&) {  // it reports the dead server: expected
    }
  });
  std::promise<void> kill_server;
  std::promise<void> pushed;
  std::thread server_thread([&, dead = kill_server.get_future()]() mutable {
    Config c = base;
    c.node_role = role::server;
    Server<transport::tcp> server(c);
    dead.wait_for(std::chrono::seconds(
        30));  // then destroyed without the scheduler's word: its links just close
  });
  std::string error;
  double took = 0;
  std::thread w0([&] {
    Config c = base;
    c.worker_id = 0;
    comm_t comm(c);
    std::vector<float> v(100000, 1.0f);
    auto h = comm.push_pull("pending", std::span(v));  // worker 1 never pushes it
    pushed.set_value();
    auto start = clock_type::now();
    error = message_of<communicator_error>([&] { h.wait(); });
    took = seconds_since(start);
  });
  std::thread w1([&] {
    Config c = base;
    c.worker_id = 1;
    comm_t comm(c);
    pushed.get_future().wait_for(std::chrono::seconds(30));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill_server.set_value();
  });
  w0.join();
  w1.join();
  server_thread.join();
  scheduler_thread.join();
  CHECK_THAT(error, Contains("server 0") && Contains("'pending'"));
  CHECK(took < 5.0);
}

TEST_CASE("a worker that vanishes fails the others' pending handles naming it", "[faults]") {
  cluster c(test::base_config(2, 1));
  std::promise<void> pushed;
  std::string error;
  std::thread impostor([&] {
    c.guard_worker([&] {
      // A worker that joins like any other, then dies without a word (as a crash looks).
      Config cfg = c.worker_config(1);
      transport::tcp net(cfg);
      rendezvous::client<transport::tcp> control(net, cfg);
      auto welcome = control.join(rendezvous::hello::from(cfg, role::worker));
      auto link =
          net.connect(welcome.servers[0].host, welcome.servers[0].port, cfg.connect_timeout);
      rendezvous::say_peer_hello(*link, std::make_shared<rendezvous::inbox>(), 1, 0, cfg.job_token,
                                 cfg.hello_timeout, "server 0");
      pushed.get_future().wait_for(std::chrono::seconds(30));
      net.stop();
    });
  });
  std::thread w0([&] {
    c.guard_worker([&] {
      comm_t comm(c.worker_config(0));
      std::vector<float> v(1000, 1.0f);
      auto h = comm.push_pull("orphan", std::span(v));
      pushed.set_value();
      error = message_of<communicator_error>([&] { h.wait(); });
    });
  });
  impostor.join();
  w0.join();
  c.join();
  CHECK_THAT(error, Contains("worker 1") && Contains("'orphan'"));
}

TEST_CASE("a push_pull that cannot complete fails at its deadline naming the server", "[faults]") {
  auto cfg = test::base_config(2, 1);
  cfg.op_timeout = std::chrono::milliseconds(1000);
  cluster c(cfg);
  std::string error;
  double took = 0;
  std::atomic<bool> done{false};
  c.run_workers(
      [&](comm_t& comm, int rank) {
        if (rank == 0) {
          std::vector<float> v(10, 1.0f);
          auto start = clock_type::now();
          error = message_of<communicator_error>(
              [&] { comm.push_pull("lonely", std::span(v)).wait(); });
          took = seconds_since(start);
          done = true;
        } else {
          while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      },
      /*strict=*/false);
  CHECK_THAT(error, Contains("'lonely'") && Contains("1000 ms") && Contains("server 0"));
  CHECK(took >= 0.9);
  CHECK(took < 5.0);
}

TEST_CASE("a push_pull nobody waits for still fails at its deadline, and the communicator with it",
          "[faults]") {
  auto cfg = test::base_config(2, 1);
  cfg.op_timeout = std::chrono::milliseconds(1000);
  cluster c(cfg);
  std::string error, dead;
  double finished_after = -1;
  std::atomic<bool> done{false};
  c.run_workers(
      [&](comm_t& comm, int rank) {
        if (rank == 0) {
          std::vector<float> v(10, 1.0f);
          const auto start = clock_type::now();
          auto finished = std::make_shared<std::promise<double>>();
          auto h = comm.push_pull("unwatched", std::span(v));
          h.when_done([finished, start] { finished->set_value(seconds_since(start)); });
          // Not the handle: a trainer that polls something else is told all the same.
          auto when = finished->get_future();
          if (when.wait_for(std::chrono::seconds(8)) == std::future_status::ready)
            finished_after = when.get();
          dead = message_of<communicator_error>([&] { comm.throw_if_failed(); });
          error = message_of<communicator_error>([&] { h.wait(); });
          done = true;
        } else {
          while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      },
      /*strict=*/false);
  CHECK(finished_after >= 0.9);
  CHECK(finished_after < 5.0);
  CHECK_THAT(error, Contains("'unwatched'") && Contains("1000 ms") && Contains("server 0"));
  CHECK_THAT(dead, Contains("'unwatched'") && Contains("did not finish"));
}

TEST_CASE("a job token keeps out other jobs' workers and strangers", "[faults]") {
  auto cfg = test::base_config(1, 1);
  cfg.job_token = "job-a";
  cluster c(cfg);
  auto other_job = c.worker_config();
  other_job.job_token = "job-b";
  auto m = message_of<usage_error>([&] { comm_t comm(other_job); });
  CHECK_THAT(m, Contains("BYTEPS_JOB_TOKEN") && !Contains("job-a") && !Contains("job-b"));
  bool stranger_dropped = false;
  c.run_workers([&](comm_t& comm, int) {
    // A peer_hello without the token is dropped; the job goes on.
    wire::header h;
    h.type = wire::msg::peer_hello;
    auto b = wire::encode(h);
    stranger_dropped = peer_hangs_up_on(c.server_port(0), {b.begin(), b.end()});
    std::vector<float> v(10, 4.0f);
    comm.push_pull("x", std::span(v)).wait();
    BPS_EXPECT(v[0] == 4.0f, "got {}", v[0]);
  });
  CHECK(stranger_dropped);
}

TEST_CASE("a worker that leaves after a failure fails the job, naming it and its reason",
          "[faults]") {
  // Issue 15: a job one of whose workers failed must not look like a success. Worker 1 leaves
  // with shutdown(failure) after a good round; worker 0 leaves cleanly. The scheduler and the
  // servers then end with the failure, naming worker 1 and its reason.
  cluster c(test::base_config(2, 1));
  c.run_workers(
      [](comm_t& comm, int rank) {
        std::vector<float> v(16, 1.0f);
        comm.push_pull("w", std::span(v)).wait();
        BPS_EXPECT(v[0] == 2.0f, "rank {}: {}", rank, v[0]);
        comm.barrier();
        if (rank == 1) comm.shutdown("its loss went to NaN");
      },
      false);
  REQUIRE(c.node_error());
  const auto msg = message_of<std::exception>([&] { std::rethrow_exception(c.node_error()); });
  CHECK_THAT(msg, Contains("worker 1"));
  CHECK_THAT(msg, Contains("left after a failure: its loss went to NaN"));
}

TEST_CASE("a communicator destroyed by an exception fails the job", "[faults]") {
  cluster c(test::base_config(1, 1));
  const auto msg = message_of<std::runtime_error>([&] {
    c.run_workers(
        [](comm_t& comm, int) {
          std::vector<float> v(4, 1.0f);
          comm.push_pull("w", std::span(v)).wait();
          throw std::runtime_error("the trainer gave up");
        },
        false);
  });
  CHECK(msg == "the trainer gave up");
  REQUIRE(c.node_error());
  const auto why = message_of<std::exception>([&] { std::rethrow_exception(c.node_error()); });
  CHECK_THAT(why, Contains("worker 0"));
  CHECK_THAT(why, Contains("left after a failure: its program left by an exception"));
}
