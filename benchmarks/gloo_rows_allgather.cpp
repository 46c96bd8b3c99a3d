// gloo-rows-allgather: the embedding-table step of an all-reduce system, for bps-rows-bench's
// comparison (issue 38): each rank sums its batch's duplicate ids, all-gathers the (id,
// gradient) pairs of every rank (Gloo's allgatherv, after an allgather of the counts), and adds
// them into its own replica of the table. Same flags and same draws as bps-rows-bench; rank 0
// prints the same columns. Start one process per rank; they meet through files in --store.
//
//   d=$(mktemp -d); for r in 0 1 2 3; do gloo-rows-allgather --rank $r --size 4 --store $d & done; wait

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "rows_workload.hpp"

int main(int argc, char** argv) try {
  rows_bench::workload w;
  int rank = -1, size = -1;
  std::string store, host = "127.0.0.1";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: gloo-rows-allgather --rank R --size N --store DIR [--host ADDR] [options]\n%s",
                  rows_bench::workload_help());
      return 0;
    }
    if (rows_bench::parse_flag(w, argc, argv, i)) continue;
    if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value or is unknown (see --help)");
    const std::string v = argv[++i];
    if (a == "--rank") rank = std::stoi(v);
    else if (a == "--size") size = std::stoi(v);
    else if (a == "--store") store = v;
    else if (a == "--host") host = v;
    else throw std::invalid_argument("unknown flag " + a + " (see --help)");
  }
  if (size < 1 || rank < 0 || rank >= size || store.empty())
    throw std::invalid_argument("need --rank R --size N --store DIR");
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  attr.ai_family = AF_INET;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(store);
  gloo::rendezvous::PrefixStore prefixed("rows", file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(std::chrono::seconds(300));
  context->connectFullMesh(prefixed, device);
  std::uint32_t tag = 0;
  auto barrier = [&] {
    gloo::BarrierOptions o(context);
    o.setTag(++tag);
    gloo::barrier(o);
  };
  const std::size_t record = 8 + w.dim * sizeof(float);
  std::vector<float> table(w.rows * w.dim, 0.0f);  // every rank's replica
  if (rank == 0) {
    std::printf("# gloo-rows-allgather: %d ranks, a table of %llu rows x %u float32 on each, "
                "batch %d ids a rank a step\n",
                size, static_cast<unsigned long long>(w.rows), w.dim, w.batch);
    std::printf("%-14s %5s %12s %16s %9s %12s\n", "system", "zipf", "unique/step", "MB/step/worker",
                "p50 ms", "rows/s");
  }
  int index = 0;
  for (double skew : w.skews) {
    const rows_bench::zipf z(w.rows, skew);
    std::vector<double> times, unique, moved;
    for (int s = 0; s < w.warmup + w.steps; ++s) {
      const auto step = rows_bench::draw_step(w, z, rank, index++);
      barrier();
      const auto began = std::chrono::steady_clock::now();
      const auto mine = rows_bench::unique(step, w.dim);  // the same merge byteps' worker does
      std::vector<std::byte> out(mine.ids.size() * record);
      for (std::size_t i = 0; i < mine.ids.size(); ++i) {
        std::memcpy(out.data() + i * record, &mine.ids[i], 8);
        std::memcpy(out.data() + i * record + 8, mine.grads.data() + i * w.dim, w.dim * sizeof(float));
      }
      std::vector<std::uint64_t> counts(static_cast<std::size_t>(size));
      std::uint64_t my_count = mine.ids.size();
      {
        gloo::AllgatherOptions o(context);
        o.setInput(&my_count, 1);
        o.setOutput(counts.data(), counts.size());
        o.setTag(++tag);
        gloo::allgather(o);
      }
      std::vector<std::size_t> bytes(counts.size());
      std::size_t total = 0;
      for (std::size_t r = 0; r < counts.size(); ++r) total += bytes[r] = counts[r] * record;
      std::vector<std::byte> all(total);
      {
        gloo::AllgathervOptions o(context);
        o.setInput(out.data(), out.size());
        o.setOutput(all.data(), bytes);
        o.setTag(++tag);
        gloo::allgatherv(o);
      }
      for (std::size_t at = 0; at < total; at += record) {  // the update, on every replica
        std::uint64_t id;
        std::memcpy(&id, all.data() + at, 8);
        const auto* g = reinterpret_cast<const float*>(all.data() + at + 8);
        float* row = table.data() + id * w.dim;
        for (std::uint32_t j = 0; j < w.dim; ++j) row[j] -= 0.001f * g[j];
      }
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (s < w.warmup) continue;
      times.push_back(took);
      unique.push_back(static_cast<double>(mine.ids.size()));
      // A ring all-gather: each rank sends what it passes on and receives every other rank's.
      moved.push_back(2.0 * static_cast<double>(total - out.size()));
    }
    const double p50 = rows_bench::median(times);
    if (rank == 0)
      std::printf("%-14s %5.2f %12.0f %16.3f %9.3f %12.0f\n", "gloo-allgather", skew,
                  rows_bench::median(unique), rows_bench::median(moved) / 1e6, p50 * 1e3,
                  static_cast<double>(w.batch) * size / p50);
    std::fflush(stdout);
  }
  barrier();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gloo-rows-allgather: %s\n", e.what());
  return 1;
}
