// bps::local::host: several processes per machine (threads here, each with its own communicator
// and its own mappings of the shared memory) reduce among themselves, push_pull their slices,
// and gather the sum. Every result is compared with the exact reference sum.
#include "cluster.hpp"
#include "exact_rounds.hpp"
#include "values.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include <unistd.h>

using namespace bps;
using bps::test::cluster;
using bps::test::host_comm_t;

namespace {

// Files in /dev/shm of the job `job_id`.
int shm_files_of(std::uint64_t job_id) {
  const auto prefix = fmt::format("bps-{:016x}-", job_id);
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().starts_with(prefix)) ++n;
  return n;
}

// Every dtype at odd sizes for several rounds on machines with these local sizes; every local
// rank must get the exact sum over every process.
void every_dtype(const std::vector<int>& local_sizes, int servers, int rounds) {
  auto cfg = test::base_config(static_cast<int>(local_sizes.size()), servers);
  cfg.partition_bytes = 8192;
  cluster c(cfg);
  const int processes = std::accumulate(local_sizes.begin(), local_sizes.end(), 0);
  const std::size_t sizes[] = {1, 2, 3, 7, 1023, 4097, 20011};
  std::mutex mu;
  std::uint64_t job = 0;
  c.run_local<host_comm_t>(local_sizes, [&](host_comm_t& comm) {
    BPS_EXPECT(comm.size() == processes, "size {} (expected {})", comm.size(), processes);
    {
      std::lock_guard lock(mu);
      job = comm.job_id();
    }
    for (int round = 0; round < rounds; ++round)
      test::exact_round_every_dtype(comm, sizes, round, processes, "");
  });
  // Every segment was unlinked once all local ranks had mapped it, and the rest at shutdown.
  CHECK(job != 0);
  CHECK(shm_files_of(job) == 0);
}

}  // namespace

TEST_CASE("host: 2 machines x 2 local ranks + 2 servers - every dtype - odd sizes", "[local]") {
  every_dtype({2, 2}, 2, 5);
}

TEST_CASE("host: machines with 1 and 3 local ranks agree on slices", "[local]") {
  every_dtype({1, 3}, 2, 3);
}

TEST_CASE("host: one machine of 3 local ranks - one server", "[local]") {
  every_dtype({3}, 1, 3);
}

TEST_CASE("host: ranks are machine-major - average and broadcast", "[local]") {
  cluster c(test::base_config(2, 1));
  c.run_local<host_comm_t>({2, 3}, [](host_comm_t& comm) {
    const int expect_rank = comm.machine() == 0 ? comm.local_rank() : 2 + comm.local_rank();
    BPS_EXPECT(comm.rank() == expect_rank, "rank {} on machine {} local rank {}", comm.rank(),
               comm.machine(), comm.local_rank());
    BPS_EXPECT(comm.size() == 5 && comm.machines() == 2, "size {} machines {}", comm.size(),
               comm.machines());
    std::vector<double> v(10001, static_cast<double>(comm.rank()));
    comm.push_pull("mean", std::span(v), {.average = true}).wait();
    for (std::size_t i = 0; i < v.size(); ++i)
      BPS_EXPECT(v[i] == 2.0, "element {} is {}, the mean of ranks 0..4 is 2", i, v[i]);

    std::vector<float> b(777);
    for (std::size_t i = 0; i < b.size(); ++i)
      b[i] = comm.rank() == 3 ? static_cast<float>(i) - 0.5f : 99.0f;
    comm.broadcast("weights", std::span(b), 3).wait();
    for (std::size_t i = 0; i < b.size(); ++i)
      BPS_EXPECT(b[i] == static_cast<float>(i) - 0.5f, "element {} is {}", i, b[i]);
    comm.barrier();
  });
}

TEST_CASE("host: a local rank that never calls fails the others by the deadline, named",
          "[local][faults]") {
  auto cfg = test::base_config(1, 1);
  cfg.op_timeout = std::chrono::milliseconds(1500);
  cluster c(cfg);
  std::mutex mu;
  std::string message;
  std::uint64_t job = 0;
  c.run_local<host_comm_t>(
      {2},
      [&](host_comm_t& comm) {
        if (comm.local_rank() == 1) {
          // Stays until local rank 0 has given up, but never calls push_pull.
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));
          return;
        }
        std::vector<float> v(100, 1.0f);
        auto m = test::message_of<communicator_error>(
            [&] { comm.push_pull("lonely", std::span(v)).wait(); });
        std::lock_guard lock(mu);
        message = m;
        job = comm.job_id();
      },
      false);
  INFO(message);
  CHECK(message.find("push_pull of 'lonely'") != std::string::npos);
  CHECK(message.find("1 of the 2 local ranks of machine 0 have not called it") !=
        std::string::npos);
  CHECK(shm_files_of(job) == 0);
}

TEST_CASE("host: local ranks that disagree on a tensor's shape get a usage error naming it",
          "[local][faults]") {
  auto cfg = test::base_config(1, 1);
  cfg.op_timeout = std::chrono::milliseconds(1500);
  cluster c(cfg);
  std::mutex mu;
  std::vector<std::string> messages;
  c.run_local<host_comm_t>(
      {2},
      [&](host_comm_t& comm) {
        // Rank 1 starts later, so rank 0 creates the segment and rank 1 finds the mismatch.
        if (comm.local_rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::vector<float> v(comm.local_rank() == 0 ? 100 : 200, 1.0f);
        std::string m;
        try {
          comm.push_pull("grad", std::span(v)).wait();
          m = "(no exception)";
        } catch (const std::exception& e) {
          m = e.what();
        }
        std::lock_guard lock(mu);
        messages.push_back(m);
      },
      false);
  REQUIRE(messages.size() == 2);
  const bool one_names_shape =
      (messages[0].find("different shape") != std::string::npos) ||
      (messages[1].find("different shape") != std::string::npos);
  INFO(messages[0] << " | " << messages[1]);
  CHECK(one_names_shape);
  CHECK(messages[0].find("push_pull of 'grad'") != std::string::npos);
  CHECK(messages[1].find("push_pull of 'grad'") != std::string::npos);
}

TEST_CASE("host: one push_pull is one operation record, with one record per partition it "
          "pushes - 2 local ranks, 1 + 3 local ranks, compressed",
          "[local]") {
  // 2 slices of 32 KiB (2 x 2 local ranks) or 3 of ~21 KiB (1 + 3): 4 KiB partitions.
  const std::size_t count = 16384;
  auto records = [&](const std::vector<int>& local_sizes, const char* compressor) {
    auto cfg = test::base_config(static_cast<int>(local_sizes.size()), 2);
    cfg.partition_bytes = 4096;
    cluster c(cfg);
    const int rounds = 3;
    c.run_local<host_comm_t>(local_sizes, [&](host_comm_t& comm) {
      push_pull_options opts;
      if (compressor != nullptr) opts.compressor = compress::by_name(compressor);
      std::vector<float> v(count);
      for (int r = 0; r < rounds; ++r) {
        std::fill(v.begin(), v.end(), 1.0f);
        comm.push_pull("t", std::span(v), opts).wait();
        BPS_EXPECT(v[0] == static_cast<float>(comm.size()) &&
                       v[count - 1] == static_cast<float>(comm.size()),
                   "round {}: sum {}", r, v[0]);
      }
      // This rank's partitions: the 4 KiB pieces of the slices it owns.
      const int slices = *std::max_element(local_sizes.begin(), local_sizes.end());
      const auto [first, last] = local::owned_slices(comm.local_rank(), comm.local_size(), slices);
      std::uint64_t parts = 0, all_parts = 0;
      for (int s = 0; s < slices; ++s) {
        const auto [b, e] = local::slice_range(count, s, slices);
        const std::uint64_t n = ((e - b) * sizeof(float) + 4095) / 4096;
        all_parts += n;
        if (s >= first && s < last) parts += n;
      }
      const auto st = comm.stats();
      // comm.stats() by stage: each owned partition reduced once, every partition gathered once.
      BPS_EXPECT(st.stages[stage::local_reduce].partitions == rounds * parts &&
                     st.stages[stage::local_gather].partitions == rounds * all_parts &&
                     st.stages[stage::pull].partitions == rounds * parts,
                 "local rank {}: {} partitions reduced, {} gathered, {} pulled; {}, {}, {} "
                 "expected",
                 comm.local_rank(), st.stages[stage::local_reduce].partitions,
                 st.stages[stage::local_gather].partitions, st.stages[stage::pull].partitions,
                 rounds * parts, rounds * all_parts, rounds * parts);
      BPS_EXPECT(st.mean_seconds(stage::local_reduce) > 0 &&
                     st.mean_seconds(stage::local_gather) > 0 &&
                     st.stages[stage::copy_out].partitions == 0,
                 "local rank {}: local_reduce {} s, local_gather {} s, {} copies out",
                 comm.local_rank(), st.mean_seconds(stage::local_reduce),
                 st.mean_seconds(stage::local_gather), st.stages[stage::copy_out].partitions);
      BPS_EXPECT(st.operation_records == static_cast<std::uint64_t>(rounds),
                 "local rank {} of {}: {} operation records for {} push_pulls", comm.local_rank(),
                 comm.local_size(), st.operation_records, rounds);
      BPS_EXPECT(st.partition_records == rounds * parts,
                 "local rank {} of {}: {} partition records, {} expected", comm.local_rank(),
                 comm.local_size(), st.partition_records, rounds * parts);
    });
  };
  SECTION("2 x 2 local ranks") { records({2, 2}, nullptr); }
  SECTION("1 + 3 local ranks: the lone rank owns 3 slices, in one record") {
    records({1, 3}, nullptr);
  }
  SECTION("2 x 2 local ranks, compressed (fp16)") { records({2, 2}, "fp16"); }
}

TEST_CASE("host: misuse is refused at the call", "[local]") {
  cluster c(test::base_config(1, 1));
  c.run_local<host_comm_t>({2}, [](host_comm_t& comm) {
    std::vector<float> v(10, 1.0f);
    // Local rank 1 joins the operation only after rank 0 tried again, so rank 0's is still in
    // flight then, however the threads are scheduled.
    if (comm.local_rank() == 0) {
      auto h = comm.push_pull("t", std::span(v));
      auto again = test::message_of<usage_error>([&] { comm.push_pull("t", std::span(v)); });
      BPS_EXPECT(again.find("still in flight") != std::string::npos, "{}", again);
      comm.barrier();
      h.wait();
    } else {
      comm.barrier();
      comm.push_pull("t", std::span(v)).wait();
    }
    std::vector<double> d(10);
    auto shape = test::message_of<usage_error>([&] { comm.push_pull("t", std::span(d)); });
    BPS_EXPECT(shape.find("first used as 10 x float32") != std::string::npos, "{}", shape);
    comm.shutdown();
    auto after = test::message_of<usage_error>([&] { comm.push_pull("t", std::span(v)); });
    BPS_EXPECT(after.find("shut down") != std::string::npos, "{}", after);
  });
}

TEST_CASE("host: a job that shares its segments is never swept as a dead one while a local rank "
          "of it lives - its lock tells",
          "[cluster][host]") {
  auto cfg = test::base_config(1, 1);
  cfg.local_size = 1;
  cfg.local_rank = 0;
  // Job ids of this test alone, from its pid.
  const std::uint64_t live_job = 0x5eed000000000000ull | static_cast<std::uint64_t>(::getpid());
  const std::uint64_t next_job = live_job + (std::uint64_t{1} << 32);
  local::host live(cfg);
  live.share_segments(true);
  live.attach(local::cluster{.job_id = live_job});
  REQUIRE(shm_files_of(live_job) == 1);  // its control segment, kept by name while it lives
  // The next job's attach sweeps what dead jobs left: the live one holds its lock, though it
  // attached as fully as a dead one would have (its pid recorded).
  local::host next(cfg);
  next.share_segments(true);
  next.attach(local::cluster{.job_id = next_job});
  CHECK(shm_files_of(live_job) == 1);
  live.shutdown();
  next.shutdown();
  CHECK(shm_files_of(live_job) == 0);
  CHECK(shm_files_of(next_job) == 0);
}
