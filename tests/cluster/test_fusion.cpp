// Tensor fusion (issue 12, BYTEPS_FUSION_BYTES): many small tensors of every dtype, started
// together behind a small scheduling credit, travel in push_batch and answer_batch frames and
// still sum exactly; with fusion off nothing is batched and the sums are the same.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <exception>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster.hpp"
#include "faulty_cluster.hpp"
#include "run_cluster.hpp"
#include "short_schedule.hpp"
#include "values.hpp"

using namespace bps;

namespace {

using ipc_tcp = transport::ipc<transport::tcp>;
using ipc_comm = Communicator<ipc_tcp, local::none, partition::by_bytes, schedule::priority>;

// The job's tensors: a large one first, whose partitions take the whole credit while the
// others are started; then 100 small ones of every dtype, from 1 element to 64 KiB; then two
// more large ones (one of an odd size).
std::vector<std::pair<dtype, std::size_t>> tensors() {
  std::vector<std::pair<dtype, std::size_t>> t;
  t.emplace_back(dtype::float32, (16u << 20) / 4);
  for (std::size_t k = 0; k < 100; ++k) {
    const dtype d = all_dtypes[k % std::size(all_dtypes)];
    const std::size_t most = 65536 / dtype_size(d);
    std::size_t n = k % 10 == 0 ? most : std::max<std::size_t>(1, most * ((k * 37) % 101) / 100);
    if (k % 10 == 5) n = 1;
    if (k % 10 == 7 && n > 3) n -= 3;  // odd sizes
    t.emplace_back(d, n);
  }
  t.emplace_back(dtype::int32, (3u << 20) / 4 + 5);
  t.emplace_back(dtype::float64, (2u << 20) / 8);
  return t;
}

// Partitions of 1 MiB and a credit of one of them: the small tensors queue behind the large
// ones, as a backward pass's do behind the last layers' gradients.
Config fusion_config(std::size_t fusion_bytes) {
  auto cfg = test::base_config(2, 2);
  cfg.partition_bytes = 1u << 20;
  cfg.scheduling_credit = 1;
  cfg.fusion_bytes = fusion_bytes;
  return cfg;
}

// Every round: all tensors started before any is waited for, then each result compared with
// the exact sum over the workers.
template <class Comm>
void exact_rounds(Comm& comm, int rounds) {
  const auto what = tensors();
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<std::byte>> buffers;
    std::vector<handle> handles;
    for (const auto& [t, n] : what) buffers.push_back(test::fill(t, n, comm.rank(), round));
    for (std::size_t k = 0; k < what.size(); ++k) {
      const auto [t, n] = what[k];
      handles.push_back(
          comm.push_pull(fmt::format("fused.{}.{}", k, dtype_name(t)), buffers[k].data(), n, t));
    }
    for (std::size_t k = 0; k < what.size(); ++k) {
      handles[k].wait();
      const auto [t, n] = what[k];
      const auto wrong = test::first_wrong(t, buffers[k], n, comm.size(), round);
      BPS_EXPECT(wrong == n, "tensor {} ({} x {}) round {} rank {}: element {} is not the sum", k,
                 n, dtype_name(t), round, comm.rank(), wrong);
    }
  }
}

// Fusion happened: batches of two or more partitions went out, and answers came back batched.
void expect_fused(const comm_stats& s, int rank) {
  BPS_EXPECT(s.batches > 0 && s.batched_partitions >= 2 * s.batches,
             "rank {}: {} batches of {} partitions", rank, s.batches, s.batched_partitions);
  BPS_EXPECT(s.answer_batches > 0 && s.batched_answers >= 2 * s.answer_batches,
             "rank {}: {} answer batches of {} answers", rank, s.answer_batches, s.batched_answers);
}

void expect_not_fused(const comm_stats& s, int rank) {
  BPS_EXPECT(s.batches == 0 && s.batched_partitions == 0 && s.answer_batches == 0 &&
                 s.batched_answers == 0,
             "rank {}: fusion is off, yet {} batches of {} partitions and {} answer batches", rank,
             s.batches, s.batched_partitions, s.answer_batches);
}

const int rounds_per_job = test::rounds(5, 3);

}  // namespace

TEST_CASE(
    "fusion: 2 workers x 2 servers, 103 tensors of every dtype - exact sums, and small "
    "ones travel in batches",
    "[cluster][fusion]") {
  test::cluster c(fusion_config(65536));
  c.run_workers([](test::comm_t& comm, int rank) {
    exact_rounds(comm, rounds_per_job);
    const auto s = comm.stats();
    expect_fused(s, rank);
    // Every partition counts once in the bytes per server, batched or not: 16 MiB + 3 MiB + 20
    // bytes + 2 MiB + the small ones, every round.
    std::uint64_t bytes = 0;
    for (const auto& [t, n] : tensors()) bytes += n * dtype_size(t);
    BPS_EXPECT(s.bytes_per_server[0] + s.bytes_per_server[1] == bytes * rounds_per_job,
               "rank {}: {} + {} bytes pushed, {} x {} expected", rank, s.bytes_per_server[0],
               s.bytes_per_server[1], bytes, rounds_per_job);
  });
}

TEST_CASE("fusion: off (BYTEPS_FUSION_BYTES=0) - the same exact sums, and no batch",
          "[cluster][fusion]") {
  test::cluster c(fusion_config(0));
  c.run_workers([](test::comm_t& comm, int rank) {
    exact_rounds(comm, rounds_per_job);
    expect_not_fused(comm.stats(), rank);
  });
}

TEST_CASE("fusion: over ipc<tcp> on one machine - exact sums, small ones in batches",
          "[cluster][fusion][ipc]") {
  test::run_cluster<ipc_tcp, ipc_comm>(fusion_config(65536), {1, 1}, [](ipc_comm& comm) {
    exact_rounds(comm, rounds_per_job);
    expect_fused(comm.stats(), comm.rank());
  });
}

TEST_CASE("fusion: over ipc<tcp>, off - exact sums, no batch", "[cluster][fusion][ipc]") {
  test::run_cluster<ipc_tcp, ipc_comm>(fusion_config(0), {1, 1}, [](ipc_comm& comm) {
    exact_rounds(comm, rounds_per_job);
    expect_not_fused(comm.stats(), comm.rank());
  });
}

TEST_CASE(
    "fusion: workers that fuse, servers that answer alone (their BYTEPS_FUSION_BYTES=0) - "
    "exact sums",
    "[cluster][fusion]") {
  // A server's BYTEPS_FUSION_BYTES decides only its answers: it takes push_batch frames
  // whatever it is, so nodes of one job need not agree on it.
  test::cluster c(fusion_config(0));
  std::vector<std::exception_ptr> failed(2);
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i)
    workers.emplace_back([&c, &failed, i] {
      try {
        Config w = c.worker_config(i);
        w.fusion_bytes = 65536;
        test::comm_t comm(w);
        exact_rounds(comm, rounds_per_job);
        const auto s = comm.stats();
        BPS_EXPECT(s.batches > 0 && s.answer_batches == 0,
                   "rank {}: {} batches sent, {} answer batches received", comm.rank(), s.batches,
                   s.answer_batches);
      } catch (...) {
        failed[static_cast<std::size_t>(i)] = std::current_exception();
      }
    });
  for (auto& w : workers) w.join();
  c.join();
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
  if (c.node_error()) std::rethrow_exception(c.node_error());
}

TEST_CASE(
    "fusion: a link cut while a push_batch goes fails every pending handle naming the "
    "server",
    "[cluster][fusion][fault-injection]") {
  auto plan = std::make_shared<transport::fault_plan>();
  const auto cut =
      plan->add({.when = {.type = wire::msg::push_batch, .from = role::worker, .sender = 0},
                 .action = transport::fault::cut()});
  auto cfg = fusion_config(65536);
  cfg.op_timeout = std::chrono::seconds(20);
  test::faulty_cluster c(cfg, plan);
  std::vector<std::string> errors;  // worker 0's, by tensor: 'big', then small.0 .. small.19
  double took = 0;
  c.run_workers(
      [&](test::faulty_comm_t& comm, int rank) {
        // Every worker has its links before the cut fails the job: one still connecting to a
        // server that already left would fail there instead.
        comm.barrier();
        // A large tensor takes the credit; the small ones behind it go in batches.
        std::vector<float> big((4u << 20) / 4, 1.0f);
        std::vector<std::vector<float>> small(20, std::vector<float>(100, 1.0f));
        const auto start = std::chrono::steady_clock::now();
        for (int round = 0; round < 3; ++round) {
          // What each operation ended with: its handle's error, or, once the communicator
          // died, the error of the call itself (a push_pull called after the cut).
          std::vector<std::string> failed(1 + small.size(), "(no exception)");
          std::vector<std::pair<std::size_t, handle>> pending;
          for (std::size_t k = 0; k <= small.size(); ++k) {
            try {
              pending.emplace_back(k, k == 0 ? comm.push_pull("big", std::span(big))
                                             : comm.push_pull(fmt::format("small.{}", k - 1),
                                                              std::span(small[k - 1])));
            } catch (const bps::error& e) {
              failed[k] = std::string("at the call: ") + e.what();
            }
          }
          for (auto& pending_call : pending) {
            auto& h = pending_call.second;  // not a structured binding: the lambda captures it
            failed[pending_call.first] = test::message_of<bps::error>([&] { h.wait(); });
          }
          const bool broke = failed.back() != "(no exception)";
          if (broke && rank == 0) {
            errors = std::move(failed);
            took = test::seconds_since(start);
          }
          if (broke) break;
        }
      },
      /*strict=*/false);
  CHECK(plan->fired(cut) == 1);
  REQUIRE(errors.size() == 21);
  for (std::size_t k = 1; k < errors.size(); ++k) {
    CAPTURE(k, errors[k]);
    if (errors[k].starts_with("at the call: "))
      CHECK_THAT(errors[k], Catch::Contains("this communicator is dead: lost server"));
    else
      CHECK_THAT(errors[k], Catch::Contains(fmt::format("push_pull of 'small.{}'", k - 1)) &&
                                Catch::Contains("lost server"));
  }
  CHECK(took < 5.0);
}
