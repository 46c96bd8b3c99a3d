// Server failover (BYTEPS_FAILOVER_TIMEOUT_MS > 0): a server crashes mid-run, a standby takes
// its rank, the workers re-send what it held, and every sum is still exact. Without a
// replacement the job fails within the timeout, naming the lost server.
#include "failover_cluster.hpp"
#include "values.hpp"
#include "exact_rounds.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <future>

using namespace bps;
using Catch::Contains;
using bps::test::failover_cluster;
using bps::test::faulty_tcp;
using namespace std::chrono_literals;

namespace {

struct tensor_spec {
  const char* name;
  dtype type;
  std::size_t count;
};

// With 4096-byte partitions these spread over both servers, several partitions each.
constexpr tensor_spec failover_tensors[] = {
    {"fo.a", dtype::float32, 5000},  // 5 partitions
    {"fo.b", dtype::float16, 6000},  // 3 partitions
    {"fo.c", dtype::int32, 100},     // 1 partition
    {"fo.d", dtype::float64, 3000},  // 6 partitions
};

// `chunk`: the servers' cut-through chunk (0: whole answers, as partitions of 4096 bytes get by
// default); 512 answers a partition in up to 8 pieces.
Config failover_config(int workers, int servers, std::size_t chunk = 0) {
  auto c = test::base_config(workers, servers);
  c.partition_bytes = 4096;
  c.server_chunk_bytes = chunk;
  c.failover_timeout = 10s;
  c.heartbeat_interval = 100ms;
  c.heartbeat_timeout = 2000ms;
  return c;
}

// One round of every tensor: all started, `between()`, all awaited, every sum checked exactly.
template <class Comm>
void exact_round(Comm& comm, int rank, int workers, int r, const std::function<void()>& between) {
  std::vector<std::vector<std::byte>> data;
  std::vector<handle> handles;
  for (const auto& t : failover_tensors) data.push_back(test::fill(t.type, t.count, rank, r));
  bps::test::issue_then_wait_all(handles, [&] {  // every buffer outlives its handle
    for (std::size_t i = 0; i < std::size(failover_tensors); ++i)
      handles.push_back(comm.push_pull(failover_tensors[i].name, data[i].data(),
                                       failover_tensors[i].count, failover_tensors[i].type));
    if (between) between();
  });
  for (std::size_t i = 0; i < std::size(failover_tensors); ++i) {
    const auto& t = failover_tensors[i];
    const auto wrong = test::first_wrong(t.type, data[i], t.count, workers, r);
    BPS_EXPECT(wrong == t.count, "worker {} round {}: {} element {} is {}, not the exact sum",
               rank, r, t.name, wrong, test::load(t.type, data[i].data(), wrong));
  }
}

// Rounds 0 .. rounds-1 of one float32 tensor of 2 workers, each sum checked exactly.
template <class Comm>
void exact_float_rounds(Comm& comm, int rank, const char* name, std::size_t count, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    auto v = test::fill(dtype::float32, count, rank, r);
    comm.push_pull(name, v.data(), count, dtype::float32).wait();
    const auto wrong = test::first_wrong(dtype::float32, v, count, 2, r);
    BPS_EXPECT(wrong == count, "worker {} round {}: element {} is {}, not the exact sum", rank, r,
               wrong, test::load(dtype::float32, v.data(), wrong));
  }
}

}  // namespace

TEST_CASE("failover: a server killed mid-run is replaced by a standby and every sum stays exact",
          "[failover]") {
  const int workers = GENERATE(2, 3);
  const bool in_flight = GENERATE(true, false);
  // Cut-through only with pushes in flight, where a kill can cut an answer's pieces short.
  const std::size_t chunk = in_flight ? GENERATE(0u, 512u) : 0u;
  CAPTURE(workers, in_flight, chunk);
  constexpr int rounds = 36, kill_at = 12;
  const auto cfg = failover_config(workers, 2, chunk);
  failover_cluster<transport::tcp> c(cfg, 1);
  using comm_type = failover_cluster<transport::tcp>::comm_type;
  // A re-sent partition is the same record: one per push_pull and one per partition, however
  // many times the replacement made a worker send it.
  std::uint64_t parts_per_round = 0;
  for (const auto& t : failover_tensors)
    parts_per_round +=
        partition::by_bytes(cfg).split(t.count * dtype_size(t.type), dtype_size(t.type)).size();
  c.run_workers([&](comm_type& comm, int rank) {
    for (int r = 0; r < rounds; ++r) {
      std::function<void()> kill;
      if (rank == 0 && r == kill_at) kill = [&] { c.kill_server(1); };
      if (in_flight || !kill) {
        exact_round(comm, rank, workers, r, kill);  // killed with this round's pushes in flight
      } else {
        kill();  // killed between rounds (the other workers may be in the middle of one)
        exact_round(comm, rank, workers, r, {});
      }
    }
    const auto st = comm.stats();
    BPS_EXPECT(st.operation_records == rounds * std::size(failover_tensors),
               "rank {}: {} operation records for {} push_pulls", rank, st.operation_records,
               rounds * std::size(failover_tensors));
    BPS_EXPECT(st.partition_records == rounds * parts_per_round,
               "rank {}: {} partition records for {} partitions", rank, st.partition_records,
               rounds * parts_per_round);
  });
  CHECK(c.replacements() == 1);
}

TEST_CASE(
    "failover: a server killed between the pieces of an answer is replaced and sums stay "
    "exact",
    "[failover][cut_through]") {
  // The victim's first piece of a round of "long" is held back 300 ms on its way to worker 0,
  // and the server is killed meanwhile: worker 0 has none or part of the answer, worker 1 may
  // have all of it. The replacement must answer both from the start, with the same bits.
  const std::uint64_t key = tensor_key("long");
  const int victim = server_for(key, 0, 2, key_hash_fn::djb2);
  auto plan = std::make_shared<transport::fault_plan>();
  const auto held = plan->add({.when = {.type = wire::msg::pull_response,
                                        .from = role::server,
                                        .key = key,
                                        .round = 3,
                                        .also =
                                            [](const transport::outgoing_frame& f) {
                                              return (f.header.flags & wire::flag_piece) != 0 &&
                                                     (f.header.flags & wire::flag_last_piece) == 0;
                                            }},
                               .action = transport::fault::delay(300ms)});
  failover_cluster<faulty_tcp> c(failover_config(2, 2, 512), 1, plan);
  std::string killer_error;
  std::thread killer([&] {
    if (!plan->wait_fired(held, 1, 30s)) {
      killer_error = "no piece of round 3 was sent";
      return;
    }
    try {
      c.kill_server(victim);
    } catch (const std::exception& e) {
      killer_error = e.what();
    }
  });
  using comm_type = failover_cluster<faulty_tcp>::comm_type;
  c.run_workers([&](comm_type& comm, int rank) {
    exact_float_rounds(comm, rank, "long", 1024, 8);  // one 4096-byte partition: 8 pieces
  });
  killer.join();
  CHECK(killer_error.empty());
  CHECK(plan->fired(held) == 1);
  CHECK(c.replacements() == 1);
}

TEST_CASE("failover: with no replacement the job fails within the timeout naming the lost server",
          "[failover]") {
  auto cfg = failover_config(2, 2);
  cfg.failover_timeout = 1500ms;
  failover_cluster<transport::tcp> c(cfg, 0);
  using comm_type = failover_cluster<transport::tcp>::comm_type;
  using clock_type = std::chrono::steady_clock;
  std::atomic<clock_type::rep> killed_at{0};
  std::string errors[2];
  double took[2] = {0, 0};
  c.run_workers(
      [&](comm_type& comm, int rank) {
        errors[rank] = test::message_of<communicator_error>([&] {
          for (int r = 0; r < 50; ++r) {
            exact_round(comm, rank, 2, r, [&] {
              if (rank == 0 && r == 3) {
                killed_at = clock_type::now().time_since_epoch().count();
                c.kill_server(1);
              }
            });
          }
        });
        const auto at = clock_type::time_point(clock_type::duration(killed_at.load()));
        took[rank] = test::seconds_since(at);
      },
      false);
  for (int w = 0; w < 2; ++w) {
    CAPTURE(w);
    CHECK_THAT(errors[w], Contains("server 1") &&
                              Contains("no replacement server joined within 1500 ms") &&
                              Contains("BYTEPS_FAILOVER_TIMEOUT_MS"));
    CHECK(took[w] < 1.5 + 1.5);
  }
  REQUIRE(c.scheduler_error());
  CHECK_THAT(test::message_of<communicator_error>([&] { std::rethrow_exception(c.scheduler_error()); }),
             Contains("server 1") && Contains("BYTEPS_SERVER_STANDBY=1"));
}

TEST_CASE("failover: workers a round apart when the server dies still get exact sums",
          "[failover]") {
  // Worker 0 receives round R's sum of "split"; worker 1's answer is dropped, so it still waits
  // for round R while worker 0 already pushed round R+1. Then the server owning "split" dies.
  // The replacement must give worker 1 round R's sum (from worker 0's offer) and then sum R+1.
  // Variants: the offers reach it in either order (the other delayed), or as they come.
  const int variant = GENERATE(0, 1, 2);
  CAPTURE(variant);
  constexpr std::uint64_t R = 5;
  const std::uint64_t key = tensor_key("split");
  const int victim = server_for(key, 0, 2, key_hash_fn::djb2);
  auto plan = std::make_shared<transport::fault_plan>();
  using transport::fault;
  // Worker 1's push of round R comes second, so the server answers it second; that answer is lost.
  plan->add({.when = {.type = wire::msg::push, .sender = 1, .key = key, .round = R},
             .action = fault::delay(150ms)});
  const auto dropped = plan->add(
      {.when = {.type = wire::msg::pull_response, .from = role::server, .key = key, .round = R},
       .action = fault::drop(),
       .skip = 1});
  const auto ahead = plan->add(
      {.when = {.type = wire::msg::push, .sender = 0, .key = key, .round = R + 1},
       .action = fault::delay(1ms)});
  if (variant != 0) {
    // 1: worker 0's offer of round R comes last (the round completes by the offer);
    // 2: worker 1's offer and re-push come last (its re-push is answered from the kept sum).
    plan->add({.when = {.type = wire::msg::sum_offer, .sender = variant == 1 ? 0u : 1u, .key = key},
               .action = fault::delay(300ms)});
  }
  failover_cluster<faulty_tcp> c(failover_config(2, 2), 1, plan);
  std::string killer_error;
  std::thread killer([&] {
    if (!plan->wait_fired(dropped, 1, 30s) || !plan->wait_fired(ahead, 1, 30s)) {
      killer_error = "the split round never happened";
      return;
    }
    std::this_thread::sleep_for(50ms);  // worker 0's push of round R+1 reaches the server
    try {
      c.kill_server(victim);
    } catch (const std::exception& e) {
      killer_error = e.what();
    }
  });
  using comm_type = failover_cluster<faulty_tcp>::comm_type;
  c.run_workers([&](comm_type& comm, int rank) {
    exact_float_rounds(comm, rank, "split", 64, static_cast<int>(R) + 5);
  });
  killer.join();
  CHECK(killer_error.empty());
  CHECK(plan->fired(dropped) == 1);
  CHECK(c.replacements() == 1);
}

TEST_CASE("failover: a server restarted with its BYTEPS_SERVER_ID takes its rank back",
          "[failover]") {
  constexpr int rounds = 20, kill_at = 7;
  failover_cluster<transport::tcp> c(failover_config(2, 2), 0);
  using comm_type = failover_cluster<transport::tcp>::comm_type;
  c.run_workers([&](comm_type& comm, int rank) {
    for (int r = 0; r < rounds; ++r) {
      exact_round(comm, rank, 2, r, [&] {
        if (rank != 0 || r != kill_at) return;
        c.kill_server(0);
        c.restart_server(0);
      });
    }
  });
  CHECK(c.replacements() == 1);
}

TEST_CASE("failover: a server that stops responding is replaced after the heartbeat timeout",
          "[failover]") {
  // The first server falls silent with pushes in flight: the scheduler replaces it after
  // BYTEPS_HEARTBEAT_TIMEOUT_MS, and the workers drop their still-open links to it and re-send
  // to the standby. Either every frame it sends is lost (its host hangs), or only its
  // heartbeats (it still serves the workers, and when the scheduler drops it, it answers them
  // with fatal errors, which must not fail them).
  const bool only_heartbeats = GENERATE(false, true);
  CAPTURE(only_heartbeats);
  auto cfg = failover_config(2, 2);
  cfg.heartbeat_timeout = 600ms;
  auto silent = std::make_shared<transport::fault_plan>();
  failover_cluster<faulty_tcp> c(cfg, 1, nullptr, silent);
  using comm_type = failover_cluster<faulty_tcp>::comm_type;
  c.run_workers([&](comm_type& comm, int rank) {
    int after = 0;  // rounds since the replacement
    for (int r = 0; r < 20 || after < 3; ++r) {
      BPS_EXPECT(r < 100000, "no replacement after {} rounds", r);
      exact_round(comm, rank, 2, r, [&] {
        if (rank != 0 || r != 8) return;
        transport::frame_match what;
        if (only_heartbeats) what.type = wire::msg::heartbeat;
        silent->add({.when = what, .action = transport::fault::drop(),
                     .times = transport::fault_rule::always});
      });
      // Both workers go on until worker 0 saw the replacement (rounds keep pushes in flight
      // while the scheduler's heartbeat timeout runs out).
      std::int32_t go = rank == 0 && c.replacements() == 0 ? 1 : 0;
      comm.push_pull("go", std::span(&go, 1)).wait();
      if (go == 0) ++after;
    }
  });
  CHECK(c.replacements() == 1);
}

TEST_CASE("failover: a worker that vanishes still fails the job, naming it", "[failover]") {
  // Failover covers servers only. The servers give up on the job when a worker's link drops;
  // the other worker must not take that for a lost server and wait: the scheduler's report
  // names the worker.
  failover_cluster<transport::tcp> c(failover_config(2, 2), 1);
  std::promise<void> pushed;
  std::string error;
  double took = 0;
  std::thread impostor([&] {
    try {
      // A worker that joins like any other, then dies without a word (as a crash looks).
      Config cfg = c.worker_config(1);
      transport::tcp net(cfg);
      rendezvous::client<transport::tcp> control(net, cfg);
      auto welcome = control.join(rendezvous::hello::from(cfg, role::worker));
      std::vector<std::shared_ptr<transport::tcp::link>> links;
      for (const auto& s : welcome.servers) {
        links.push_back(net.connect(s.host, s.port, cfg.connect_timeout));
        rendezvous::say_peer_hello(*links.back(), std::make_shared<rendezvous::inbox>(), 1, 0,
                                   cfg.job_token, cfg.hello_timeout, "a server");
      }
      pushed.get_future().wait_for(30s);
      std::this_thread::sleep_for(100ms);
      net.stop();
    } catch (const std::exception& e) {
      error = std::string("impostor: ") + e.what();
    }
  });
  std::thread w0([&] {
    try {
      failover_cluster<transport::tcp>::comm_type comm(c.worker_config(0));
      std::vector<float> v(5000, 1.0f);
      auto h = comm.push_pull("orphan", std::span(v));
      pushed.set_value();
      const auto start = std::chrono::steady_clock::now();
      error = test::message_of<communicator_error>([&] { h.wait(); });
      took = test::seconds_since(start);
    } catch (const std::exception& e) {
      error = std::string("worker 0: ") + e.what();
    }
  });
  impostor.join();
  w0.join();
  c.join();
  CHECK_THAT(error, Contains("worker 1") && Contains("'orphan'") &&
                        Contains("the job cannot continue"));
  CHECK(took < 5.0);
}

TEST_CASE("failover: a replacement that dies too is replaced again", "[failover]") {
  // Server 1 dies, and its replacement dies as soon as it took the rank (the workers may still
  // be connecting to it or re-sending); a second standby takes over. Then, later, server 0.
  failover_cluster<transport::tcp> c(failover_config(2, 2), 3);
  using comm_type = failover_cluster<transport::tcp>::comm_type;
  c.run_workers([&](comm_type& comm, int rank) {
    for (int r = 0; r < 30; ++r) {
      exact_round(comm, rank, 2, r, [&] {
        if (rank != 0) return;
        if (r == 10) {
          c.kill_server(1);
          c.kill_server(1);  // the replacement, once it holds the rank
        }
        if (r == 20) c.kill_server(0);
      });
    }
  });
  CHECK(c.replacements() == 3);
}
