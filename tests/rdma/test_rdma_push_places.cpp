// Pushes over RDMA go straight to a place that stays (server/landing.hpp): each server lands a
// worker link's pushes of a partition in one registered buffer from round to round, and says so,
// so after the first round the worker writes every push `direct` (no announce, no grant: no
// round trip), counted by the transports (rdma_msg::counters), with every sum exact. Also with
// cut-through (pushes written in pieces of the chunk, answered in pieces) and with the landing
// budget spent (the rest ask every round, as before).
#include <byteps/bodies.hpp>
#include <catch2/catch.hpp>

#include "../cluster/cluster.hpp"
#include "../cluster/run_cluster.hpp"
#include "../cluster/values.hpp"
#include "rdma_pair.hpp"

using namespace bps;
using namespace bps::test;

namespace {

using places_comm_t = Communicator<emu_rdma, local::none, partition::by_bytes, schedule::priority>;

constexpr int workers = 2, servers = 2;
constexpr std::size_t part_bytes = 8192;  // announced: more than a 4 KiB slot holds

struct tallies {
  std::shared_ptr<transport::rdma_msg::tally> worker = std::make_shared<transport::rdma_msg::tally>();
  std::shared_ptr<transport::rdma_msg::tally> server = std::make_shared<transport::rdma_msg::tally>();
};

// `rounds` rounds on 2 workers x 2 servers; each worker's tensors (one per dtype in `types`,
// `parts` partitions each) live in one arena it registered, refilled every round; every
// result is checked against the exact sum. The transports count into `t`.
void run_rounds(Config base, std::span<const dtype> types, std::size_t parts, int rounds,
                const tallies& t) {
  base.partition_bytes = part_bytes;
  const std::size_t tensor_bytes = parts * part_bytes;
  run_cluster<emu_rdma, places_comm_t, emu_rdma>(
      base, std::vector<int>(workers, 1),
      [&](places_comm_t& comm) {
        const int w = comm.rank();
        std::vector<std::byte> arena(types.size() * tensor_bytes);
        comm.register_memory(arena);
        for (int r = 0; r < rounds; ++r) {
          std::vector<handle> handles;
          for (std::size_t k = 0; k < types.size(); ++k) {
            const dtype type = types[k];
            const std::size_t n = tensor_bytes / dtype_size(type);
            std::byte* data = arena.data() + k * tensor_bytes;
            for (std::size_t i = 0; i < n; ++i) store(type, data, i, value_at(type, i, w, r));
            handles.push_back(comm.push_pull(fmt::format("g.{}", dtype_name(type)), data, n, type));
          }
          for (auto& h : handles) h.wait();
          for (std::size_t k = 0; k < types.size(); ++k) {
            const dtype type = types[k];
            const std::size_t n = tensor_bytes / dtype_size(type);
            const std::vector<std::byte> got(arena.begin() + static_cast<std::ptrdiff_t>(k * tensor_bytes),
                                             arena.begin() + static_cast<std::ptrdiff_t>((k + 1) * tensor_bytes));
            const auto wrong = first_wrong(type, got, n, workers, r);
            BPS_EXPECT(wrong == n, "worker {} round {} {}: element {} is not the exact sum", w, r,
                       dtype_name(type), wrong);
          }
        }
      },
      {},
      [&](const Config& c) {
        auto o = emu_rdma::options::from(c);
        o.tally = c.node_role == role::server ? t.server : t.worker;
        return o;
      });
}

}  // namespace

TEST_CASE("rdma push places: after the first round every push goes direct, every dtype on 2x2, exact sums",
          "[rdma][registration][cluster][push_places]") {
  const std::size_t chunk = GENERATE(std::size_t{0}, std::size_t{2048});
  CAPTURE(chunk);
  constexpr int rounds = 4;
  constexpr std::uint64_t later = rounds - 1;  // rounds after the first
  constexpr std::size_t parts = 4;
  const std::uint64_t pushes = workers * parts * std::size(all_dtypes);  // a round's
  Config base = base_config(workers, servers);
  base.server_chunk_bytes = chunk;
  tallies t;
  run_rounds(base, all_dtypes, parts, rounds, t);
  const auto wc = t.worker->snapshot();
  const auto sc = t.server->snapshot();
  // Pushes: round 0 announces each, the server grants its landing buffer and advertises it
  // (stays); rounds 1-3 write straight there, nothing asked, nothing moved or revoked.
  CHECK(wc.announced == pushes);
  CHECK(wc.cached == pushes * later);
  CHECK(sc.granted_in_place == pushes);
  CHECK(sc.advertised == pushes);
  CHECK(sc.granted_staged == 0);
  CHECK(sc.moved == 0);
  CHECK(wc.forgotten == 0);
  // From the registered arena, in one write each, or with cut-through in pieces of the chunk
  // the server cuts such a push in (1 KiB: an eighth of it, half the server's 2 KiB).
  const std::uint64_t writes_per_push =
      chunk == 0 ? 1 : part_bytes / bps::server::chunk_for(chunk, part_bytes);
  CHECK(wc.writes_from_payload == pushes * rounds * writes_per_push);
  CHECK(wc.writes_staged == 0);
  if (chunk == 0) {
    // Whole answers: the same, the other way (the worker's registered arena stays).
    CHECK(sc.announced == pushes);
    CHECK(sc.cached == pushes * later);
    CHECK(wc.advertised == pushes);
    CHECK(wc.moved == 0);
  } else {
    CHECK(sc.announced == 0);  // answered in 1 KiB pieces, each one SEND
    CHECK(sc.cached == 0);
  }
  CHECK(sc.writes_staged == 0);  // sums are answered from registered buffers
  CHECK(emu::fabric::shared_default()->violations().empty());
}

TEST_CASE("rdma push places: past BYTEPS_SERVER_LANDING_BYTES pushes ask every round, sums exact",
          "[rdma][registration][cluster][push_places]") {
  constexpr int rounds = 3;
  constexpr std::uint64_t later = rounds - 1;
  constexpr std::size_t parts = 16;
  const dtype fp32[] = {dtype::float32};
  Config base = base_config(workers, servers);
  base.server_chunk_bytes = 0;
  base.server_landing_bytes = 3 * part_bytes;  // 3 landing buffers per server
  tallies t;
  run_rounds(base, fp32, parts, rounds, t);
  const auto wc = t.worker->snapshot();
  const auto sc = t.server->snapshot();
  constexpr std::uint64_t pushes = workers * parts;
  constexpr std::uint64_t landed = 3 * servers;  // each server has more than 3 (worker, part)
  CHECK(sc.advertised == landed);
  CHECK(wc.cached == landed * later);
  CHECK(wc.announced == pushes * rounds - landed * later);
  CHECK(sc.granted_in_place == pushes * rounds - landed * later);
  CHECK(sc.granted_staged == 0);  // the rest land in registered pool buffers
  CHECK(sc.moved == 0);
  CHECK(emu::fabric::shared_default()->violations().empty());
}
