// Embedding tables with server failover: a server is killed mid-run, a standby takes its rank and
// replays the dead server's journal (embedding/journal.hpp), the workers re-send what it owed,
// and every row is still exactly the reference's, which is also what the run without a fault
// gives (test_tables.cpp). Without a journal the job says so.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "failover_cluster.hpp"
#include "tables_reference.hpp"

using namespace bps;
using Catch::Contains;
using bps::test::failover_cluster;
using namespace std::chrono_literals;
using namespace bps::test::tables;

namespace {

// A directory of its own under the system's temporary one, removed at the end.
struct scratch_dir {
  std::filesystem::path path;
  explicit scratch_dir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             (name + "-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()))) {
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::size_t files() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path)) ++n;
    return n;
  }
};

Config tables_failover_config(int workers, int servers, const std::string& journal_dir) {
  auto c = test::base_config(workers, servers);
  c.failover_timeout = 10s;
  c.heartbeat_interval = 100ms;
  c.heartbeat_timeout = 2000ms;
  c.table_journal_dir = journal_dir;
  return c;
}

}  // namespace

TEST_CASE("tables failover: a server killed with pushes in flight is replaced and every row equals the reference - sgd, adagrad, adam, 2 and 3 workers x 2 servers",
          "[failover]") {
  const int workers = GENERATE(2, 3);
  CAPTURE(workers);
  scratch_dir dir("bps-journal");
  // One table per optimizer, one after the other in one job; server 1 is killed in each (the
  // second and third kills take a replacement whose journal is itself a replay).
  failover_cluster<transport::tcp> c(tables_failover_config(workers, 2, dir.path.string()), 3);
  using comm_type = failover_cluster<transport::tcp>::comm_type;
  c.run_workers([&](comm_type& comm, int rank) {
    int kill_round = 3;
    for (const auto& entry : optimizers) {
      const auto spec = spec_of("fo_" + entry.second.kind, entry.first, dtype::float32);
      exact_rounds<float>(comm, spec, entry.second, 7, [&](int r) {
        if (rank == 0 && r == kill_round) c.kill_server(1);
      });
      ++kill_round;  // rounds 3, 4 and 5 of the three tables
    }
    comm.barrier();
  });
  CHECK(c.replacements() == 3);
  CHECK(dir.files() == 0);  // the job ended well: the servers removed their journals
}

TEST_CASE("tables failover: float16 storage, server 0 killed once every worker's push of the round is in - adam, 2 workers x 2 servers",
          "[failover]") {
  scratch_dir dir("bps-journal");
  failover_cluster<transport::tcp> c(tables_failover_config(2, 2, dir.path.string()), 1);
  using comm_type = failover_cluster<transport::tcp>::comm_type;
  c.run_workers([&](comm_type& comm, int rank) {
    const auto& adam = optimizers.back();
    const auto spec = spec_of("fo_half", adam.first, dtype::float16);
    exact_rounds<float16>(comm, spec, adam.second, 6, [&](int r) {
      if (r != 4) return;
      comm.barrier();  // round 3 is everyone's; nobody pushed round 4 but this worker, maybe
      if (rank == 0) c.kill_server(0);
    });
  });
  CHECK(c.replacements() == 1);
}

TEST_CASE("tables failover: in async mode a killed server's rows lose and double no push - sgd in exact arithmetic, 3 workers x 2 servers",
          "[failover]") {
  scratch_dir dir("bps-journal");
  auto cfg = tables_failover_config(3, 2, dir.path.string());
  cfg.enable_async = true;
  failover_cluster<transport::tcp, server::async_sum> c(cfg, 1);
  using comm_type = failover_cluster<transport::tcp, server::async_sum>::comm_type;
  const async_rows_exact job{.table = "fo_async", .rounds = 8, .more_ids = true};
  c.run_workers([&](comm_type& comm, int rank) {
    comm.declare_table(job.spec());
    for (int r = 1; r <= job.rounds; ++r) {
      const auto g = job.grads(rank, r);
      auto h = comm.push_rows(job.table, job.ids(rank, r), std::span(g));
      if (rank == 0 && r == 4) c.kill_server(1);
      h.wait();
    }
    comm.barrier();  // every worker's pushes are applied
    job.check(comm);
  });
  CHECK(c.replacements() == 1);
}

TEST_CASE("tables failover: a table is refused when failover is on and the servers have no journal directory",
          "[failover]") {
  failover_cluster<transport::tcp> c(tables_failover_config(2, 1, ""), 0);
  using comm_type = failover_cluster<transport::tcp>::comm_type;
  std::vector<std::string> errors(2);
  c.run_workers([&](comm_type& comm, int rank) {
    try {
      comm.declare_table(spec_of("fo_nodir", "sgd:lr=0.1", dtype::float32));
    } catch (const usage_error& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  for (const auto& e : errors) {
    CHECK_THAT(e, Contains("declare_table of 'fo_nodir'") &&
                      Contains("server 0 has no BYTEPS_TABLE_JOURNAL_DIR"));
  }
}

TEST_CASE("tables failover: a replacement that cannot reach the dead server's journal fails the workers, naming the table and the directory",
          "[failover]") {
  scratch_dir dir("bps-journal");
  scratch_dir elsewhere("bps-journal-elsewhere");
  failover_cluster<transport::tcp> c(
      tables_failover_config(2, 2, dir.path.string()), 1, nullptr, nullptr,
      [&](Config& standby) { standby.table_journal_dir = elsewhere.path.string(); });
  using comm_type = failover_cluster<transport::tcp>::comm_type;
  CHECK_THROWS_WITH(
      c.run_workers(
          [&](comm_type& comm, int rank) {
            const auto spec = spec_of("fo_lost", "sgd:lr=0.1", dtype::float32);
            comm.declare_table(spec);
            std::vector<std::uint64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
            std::vector<float> g(ids.size() * spec.dim, 1.0f);
            comm.push_rows(spec.name, ids, std::span(g)).wait();
            comm.barrier();
            if (rank == 0) c.kill_server(1);
            for (int r = 0; r < 50; ++r) comm.push_rows(spec.name, ids, std::span(g)).wait();
          },
          false),
      Contains("server 1's replacement refused table 'fo_lost'") &&
          Contains("no journal of it is in " + elsewhere.path.string()) &&
          Contains("rows there are lost"));
}
