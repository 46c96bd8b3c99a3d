// Compressed pushes over RDMA land in the servers' landing buffers too (server/landing.hpp):
// their sizes may change from round to round (dithering's encoding depends on the values), so a
// push goes direct when its advertised place is big enough and asks again (a larger landing
// buffer, advertised anew) when it is not. Every result must equal, bit for bit, what the test
// computes with its own instances of the same compressors (compress_reference.hpp).
#include <byteps/bodies.hpp>
#include <catch2/catch.hpp>

#include "../cluster/cluster.hpp"
#include "../cluster/compress_reference.hpp"
#include "../cluster/run_cluster.hpp"
#include "rdma_pair.hpp"

using namespace bps;
using namespace bps::test;

namespace {

using rdma_comm_t = Communicator<emu_rdma, local::none, partition::by_bytes, schedule::priority>;

std::vector<float> input(int rank, int round, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = compress_input(rank, round, i);
  return v;
}

}  // namespace

TEST_CASE("rdma compressed: pushes of changing sizes land in place, bit for bit the reference",
          "[rdma][cluster][compress][push_places]") {
  // Encodings larger than a 4 KiB slot, so they are written by RDMA: fp16 (always the same
  // size), top-k (the same), dithering (its size follows the values).
  const std::vector<std::string> recipes = {"fp16", "topk:k=0.1", "ef_topk:k=0.1", "dithering:s=4",
                                            "dithering:s=8,partition=natural,normalize=l2"};
  constexpr int rounds = 4;
  constexpr std::size_t n = 50000;  // 4 partitions of at most 16384 floats
  Config cfg = base_config(2, 2);
  cfg.partition_bytes = 65536;
  cfg.min_compress_bytes = 0;
  auto worker_tally = std::make_shared<transport::rdma_msg::tally>();
  auto server_tally = std::make_shared<transport::rdma_msg::tally>();
  std::atomic<int> rounds_checked{0};
  run_cluster<emu_rdma, rdma_comm_t, emu_rdma>(
      cfg, std::vector<int>(2, 1),
      [&](rdma_comm_t& comm) {
        const auto parts = partition::by_bytes(cfg).split(n * 4, 4);
        for (const auto& text : recipes) {
          compress_reference ref(text, cfg.num_workers, parts);
          auto spec = compress::by_name(compress::parse(text));
          for (int round = 0; round < rounds; ++round) {
            std::vector<std::vector<float>> in;
            for (int w = 0; w < cfg.num_workers; ++w) in.push_back(input(w, round, n));
            auto mine = in[static_cast<std::size_t>(comm.rank())];
            comm.push_pull("c." + text, std::span(mine), {.average = true, .compressor = spec})
                .wait();
            const auto expected = ref.round(in, true)[static_cast<std::size_t>(comm.rank())];
            const auto at = first_different(mine, expected);
            BPS_EXPECT(at == n, "'{}' round {} rank {}: element {} is {}, expected {}", text, round,
                       comm.rank(), at, mine[at], expected[at]);
            ++rounds_checked;
          }
        }
      },
      {},
      [&](const Config& c) {
        auto o = emu_rdma::options::from(c);
        o.tally = c.node_role == role::server ? server_tally : worker_tally;
        return o;
      });
  CHECK(rounds_checked == 2 * static_cast<int>(recipes.size()) * rounds);
  const auto wc = worker_tally->snapshot();
  const auto sc = server_tally->snapshot();
  // fp16 and top-k pushes of 16384-float partitions (32 KiB, 13 KiB) keep their size: after the
  // first round each goes direct. 2 workers x 3 recipes x 3 full partitions x 3 later rounds at
  // least; dithering adds what fits its place.
  CHECK(wc.cached >= 2u * 3 * 3 * 3);
  CHECK(sc.moved == 0);  // a landing buffer that grows is advertised anew, never written stale
  CHECK(sc.granted_staged == 0);
  CHECK(emu::fabric::shared_default()->violations().empty());
}
