// Compression end to end with compressors the servers decode (every built-in): workers encode
// after the local reduce, servers decode each push, sum, and encode the sum with their own
// compressor (server::decoding), workers decode. Each result must equal, bit for bit, what the
// test computes with its own instances of the same compressors (compress_reference.hpp).
#include <catch2/catch.hpp>

#include <atomic>
#include <numeric>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "compress_reference.hpp"

using namespace bps;
using bps::test::cluster;
using bps::test::comm_t;
using bps::test::host_comm_t;

namespace {

// Every built-in, with and without the decorators, at parameters that drop something.
const std::vector<std::string> every_recipe = {
    "fp16",
    "bf16",
    "onebit",
    "onebit:scaling=1",
    "topk:k=0.05",
    "randomk:k=0.05",
    "randomk:k=0.05,unbiased=1",
    "dithering:s=4",
    "dithering:s=4,partition=natural,normalize=l2",
    "dithering:s=8,partition=linear,normalize=l2",
    "dithering:s=8,partition=natural,normalize=max",
    "ef_onebit:scaling=1",
    "ef_topk:k=0.05",
    "ef_randomk:k=0.05",
    "ef_dithering:s=4",
    "nesterov_ef_onebit:scaling=1,mu=0.9",
    "nesterov_ef_topk:k=0.05,mu=0.9",
};

std::vector<float> input(int rank, int round, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = test::compress_input(rank, round, i);
  return v;
}

// `rounds` rounds of tensor `name` with compressor `text` on `comm`, each result compared with
// the reference. `lr(round)` > 0: the learning rate set before that round.
std::atomic<int> rounds_checked{0};  // results compared with the reference, by every worker

template <class Comm, class Rate>
void exact_rounds(Comm& comm, const Config& cfg, const std::string& name, const std::string& text,
                  std::size_t n, int rounds, bool average, Rate&& lr) {
  const auto parts = partition::by_bytes(cfg).split(n * 4, 4);
  test::compress_reference ref(text, cfg.num_workers, parts);
  auto spec = compress::by_name(compress::parse(text));
  for (int round = 0; round < rounds; ++round) {
    if (const double rate = lr(round); rate > 0) {
      comm.set_learning_rate(rate);
      ref.set_learning_rate(rate);
    }
    std::vector<std::vector<float>> in;
    for (int w = 0; w < cfg.num_workers; ++w) in.push_back(input(w, round, n));
    auto mine = in[static_cast<std::size_t>(comm.rank())];
    comm.push_pull(name, std::span(mine), {.average = average, .compressor = spec}).wait();
    const auto expected = ref.round(in, average)[static_cast<std::size_t>(comm.rank())];
    const auto at = test::first_different(mine, expected);
    BPS_EXPECT(at == n, "{} '{}' round {} rank {} ({} partitions): element {} is {}, expected {}",
               name, text, round, comm.rank(), parts.size(), at, mine[at], expected[at]);
    ++rounds_checked;
  }
}

Config small_partitions(int workers, int servers) {
  auto cfg = test::base_config(workers, servers);
  cfg.partition_bytes = 4096;  // several partitions per tensor
  cfg.min_compress_bytes = 0;
  return cfg;
}

}  // namespace

TEST_CASE("compressed jobs: every built-in compressor, 2 workers x 2 servers, several partitions "
          "- bit for bit the reference",
          "[cluster][compress]") {
  const auto cfg = small_partitions(2, 2);
  cluster c(cfg);
  rounds_checked = 0;
  c.run_workers([&](comm_t& comm, int) {
    for (const auto& text : every_recipe) {
      // 3000 floats: partitions of 1024, 1024 and 952 elements on both servers.
      exact_rounds(comm, cfg, "t." + text, text, 3000, 4, true, [](int) { return 0.0; });
    }
  });
  CHECK(rounds_checked == 2 * static_cast<int>(every_recipe.size()) * 4);
}

TEST_CASE("compressed jobs: one partition, no averaging - bit for bit the reference",
          "[cluster][compress]") {
  auto cfg = small_partitions(2, 2);
  cfg.partition_bytes = 65536;
  cluster c(cfg);
  rounds_checked = 0;
  c.run_workers([&](comm_t& comm, int) {
    for (const std::string text : {"ef_topk:k=0.01", "onebit:scaling=1", "dithering:s=2"})
      exact_rounds(comm, cfg, "one." + text, text, 5000, 3, false, [](int) { return 0.0; });
  });
  CHECK(rounds_checked == 2 * 3 * 3);
}

TEST_CASE("compressed jobs: set_learning_rate changes the error feedback's ratio",
          "[cluster][compress]") {
  const auto cfg = small_partitions(2, 1);
  cluster c(cfg);
  c.run_workers([&](comm_t& comm, int) {
    // The rate halves before round 2 and doubles before round 4: the reference gets the same.
    const auto rates = [](int round) { return round == 0 ? 0.1 : round == 2 ? 0.05 : round == 4 ? 0.1 : 0.0; };
    exact_rounds(comm, cfg, "lr", "ef_topk:k=0.05", 2000, 6, true, rates);
    // And it matters: a reference that never heard of the rates differs by round 2.
    const auto parts = partition::by_bytes(cfg).split(2000 * 4, 4);
    test::compress_reference with(std::string("ef_topk:k=0.05"), 2, parts),
        without(std::string("ef_topk:k=0.05"), 2, parts);
    bool differs = false;
    for (int round = 0; round < 3; ++round) {
      if (rates(round) > 0) with.set_learning_rate(rates(round));
      std::vector<std::vector<float>> in{input(0, round, 2000), input(1, round, 2000)};
      differs = with.round(in, true)[0] != without.round(in, true)[0];
    }
    BPS_EXPECT(differs, "the rate ratio changed nothing by round 2");
  });
}

TEST_CASE("compressed jobs: with local::host the machine's sum is compressed, after the local "
          "reduce and before the all-gather",
          "[cluster][compress][local]") {
  auto cfg = small_partitions(2, 2);
  cluster c(cfg);
  constexpr std::size_t n = 6000;
  // fp16 is elementwise, so the answer does not depend on slices or partitions: each machine's
  // sum (local ranks l = 0, 1 of machine m push value(m, l)) is rounded to fp16 once, the server
  // adds the two in fp32 and rounds to fp16 again. Rounding each process's value instead (before
  // the local reduce) would give other bits for these values.
  const auto value = [](int m, int l, std::size_t i) {
    return 1.0f + static_cast<float>(i % 97) * 0.00037f + static_cast<float>(m * 2 + l) * 0.00011f;
  };
  std::atomic<std::uint64_t> pushed{0};
  c.run_local<host_comm_t>({2, 2}, [&](host_comm_t& comm) {
    const int m = comm.machine(), l = comm.local_rank();
    for (int round = 0; round < 2; ++round) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = value(m, l, i) + static_cast<float>(round);
      comm.push_pull("local", std::span(v), {.compressor = compress::by_name("fp16")}).wait();
      for (std::size_t i = 0; i < n; ++i) {
        float machine[2];
        for (int k = 0; k < 2; ++k) {
          const float s = (value(k, 0, i) + static_cast<float>(round)) +
                          (value(k, 1, i) + static_cast<float>(round));
          machine[k] = to_float(to_float16(s));
        }
        const float expected = to_float(to_float16(machine[0] + machine[1]));
        BPS_EXPECT(v[i] == expected, "machine {} local rank {} round {} element {}: {} != {}", m,
                   l, round, i, v[i], expected);
      }
    }
    const auto s = comm.stats();
    pushed += std::accumulate(s.bytes_per_server.begin(), s.bytes_per_server.end(),
                              std::uint64_t{0});
    // Each partition this rank pushes is encoded once and its answer decoded once.
    BPS_EXPECT(s.stages[stage::encode].partitions == s.stages[stage::pull].partitions &&
                   s.stages[stage::decode].partitions == s.stages[stage::pull].partitions &&
                   s.stages[stage::pull].partitions > 0,
               "machine {} local rank {}: {} encoded, {} decoded, {} pulled", m, l,
               s.stages[stage::encode].partitions, s.stages[stage::decode].partitions,
               s.stages[stage::pull].partitions);
  });
  // Each machine pushes its half-size sum once per round (plus an 8-byte raw size per partition).
  CHECK(pushed.load() < 2 * 2 * (n * 2 + 8 * 8));
  CHECK(pushed.load() >= 2 * 2 * n * 2);
}
