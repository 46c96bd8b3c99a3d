// bps-micro: microbenchmarks (Google Benchmark) of what byteps does per byte and per partition.
//
//   BM_memcpy/<bytes>                     the yardstick: memcpy of the same bytes, one core
//   BM_accumulate_add<dtype>/<bytes>      the server's sum: acc += src (fp16/bf16 widen into an
//                                         fp32 accumulator); bytes/s counts the pushed payload
//                                         (<bytes> of the tensor's dtype); the counter
//                                         x_memcpy is that rate over memcpy's for the same bytes
//   BM_accumulate_finish<dtype>/<bytes>   fp32 accumulator -> fp16/bf16 reply (one rounding)
//   BM_sum_of<dtype>/<inputs>             a server's round of one partition: the sum of <inputs>
//                                         pushes of 4096000 bytes into a fresh buffer, each call
//                                         on other buffers (so from memory, as a server's
//                                         rounds of 64 MiB tensors are); bytes/s counts the
//                                         pushes; the counter x_mem is the CPU time over the
//                                         bound (inputs + 1) x bytes read or written at twice
//                                         memcpy's rate past the cache
//   BM_partition_schedule<S>/<parts>      a tensor of <parts> partitions: split, pick each
//                                         partition's server (key hash), push every partition
//                                         into the scheduler, pop and mark sent under the
//                                         credit; the counter per_partition is the time
//                                         per partition
//   BM_wire_encode, BM_wire_decode        one 64-byte frame header
//   BM_trace_hooks<on>/<parts>            the timeline's worker hooks for one operation of
//                                         <parts> partitions (begin; dispatched, sent, answered
//                                         per partition; finish): off (BYTEPS_TRACE_ON=0) they
//                                         must cost a few branches; on, a clock read and an
//                                         append each; the counter per_partition as above
//
// Targets (issue 4): fp32 sum >= 0.8x memcpy, fp16/bf16 >= 0.5x; < 2 us per partition.
// Pin to one core for stable figures, e.g. `taskset -c 1 bps-micro`.
#include <byteps/bodies.hpp>
#include <byteps/detail/tracer.hpp>  // BM_trace_hooks: not part of the public API

#include <benchmark/benchmark.h>

#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace {

struct aligned {
  explicit aligned(std::size_t bytes)
      : p(static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64))) {
    std::memset(p, 0, (bytes + 63) / 64 * 64);
  }
  ~aligned() { std::free(p); }
  aligned(const aligned&) = delete;
  aligned& operator=(const aligned&) = delete;
  std::byte* p;
};

// This thread's CPU time in seconds: what the ratios below use, so that other processes on a
// busy machine do not skew them.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// memcpy bandwidth for `bytes` per CPU second, measured once per size (best of 5 x 40 ms),
// for the x_memcpy counter.
double memcpy_bytes_per_second(std::size_t bytes) {
  static std::map<std::size_t, double> cache;
  if (auto it = cache.find(bytes); it != cache.end()) return it->second;
  aligned src(bytes), dst(bytes);
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    std::size_t reps = 0;
    const double t0 = thread_seconds();
    double t1 = t0;
    do {
      std::memcpy(dst.p, src.p, bytes);
      benchmark::ClobberMemory();
      ++reps;
      t1 = thread_seconds();
    } while (t1 - t0 < 0.04);
    best = std::max(best, static_cast<double>(reps * bytes) / (t1 - t0));
  }
  return cache[bytes] = best;
}

void BM_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  aligned src(bytes), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.p, src.p, bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

template <bps::dtype T>
void BM_accumulate_add(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / bps::dtype_size(T);
  aligned acc(bps::reduce::accumulator_bytes(T, count)), src(bytes);
  const double t0 = thread_seconds();
  for (auto _ : state) {
    bps::reduce::accumulate_add(acc.p, src.p, count, T);
    benchmark::ClobberMemory();
  }
  const double cpu = thread_seconds() - t0;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  // Both rates per CPU second of this thread (memcpy's measured apart, best of 5 x 40 ms).
  state.counters["x_memcpy"] =
      static_cast<double>(state.iterations()) * static_cast<double>(bytes) / cpu /
      memcpy_bytes_per_second(bytes);
  state.SetLabel(std::string(bps::dtype_name(T)));
}

template <bps::dtype T>
void BM_accumulate_finish(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / bps::dtype_size(T);
  aligned acc(bps::reduce::accumulator_bytes(T, count)), out(bytes);
  for (auto _ : state) {
    bps::reduce::accumulate_finish(out.p, acc.p, count, T);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  state.SetLabel(std::string(bps::dtype_name(T)));
}

template <bps::dtype T>
void BM_sum_of(benchmark::State& state) {
  constexpr std::size_t bytes = 4096000;
  constexpr std::size_t sets = 16;  // 16 x (inputs + 1) partitions: past a 32 MiB cache
  const auto inputs = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / bps::dtype_size(T);
  std::vector<std::unique_ptr<aligned>> buffers;
  for (std::size_t i = 0; i < sets * (inputs + 1); ++i)
    buffers.push_back(std::make_unique<aligned>(bytes));
  std::vector<const std::byte*> in(inputs);
  std::size_t set = 0;
  const double t0 = thread_seconds();
  for (auto _ : state) {
    for (std::size_t i = 0; i < inputs; ++i) in[i] = buffers[set * (inputs + 1) + i]->p;
    bps::reduce::sum_of(buffers[set * (inputs + 1) + inputs]->p, in, count, T);
    benchmark::ClobberMemory();
    set = (set + 1) % sets;
  }
  const double cpu = thread_seconds() - t0;
  const auto calls = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * inputs * bytes));
  const double bound = static_cast<double>((inputs + 1) * bytes) /
                       (2 * memcpy_bytes_per_second(64 << 20));
  state.counters["x_mem"] = cpu / calls / bound;
  state.SetLabel(std::string(bps::dtype_name(T)));
}

// Reducer sizes: 64 KiB (in cache) and the default partition, 4096000 bytes (memory bound).
void reducer_sizes(benchmark::internal::Benchmark* b) { b->Arg(64 << 10)->Arg(4096000); }

// And 64 MiB, past the last-level cache: the rate of memory itself, which a server summing
// rounds of 64 MiB tensors from several workers reads and writes at (benchmarks/server-cpu.sh).
BENCHMARK(BM_memcpy)->Apply(reducer_sizes)->Arg(64 << 20);
BENCHMARK(BM_accumulate_add<bps::dtype::float32>)->Apply(reducer_sizes);
BENCHMARK(BM_accumulate_add<bps::dtype::float64>)->Apply(reducer_sizes);
BENCHMARK(BM_accumulate_add<bps::dtype::float16>)->Apply(reducer_sizes);
BENCHMARK(BM_accumulate_add<bps::dtype::bfloat16>)->Apply(reducer_sizes);
BENCHMARK(BM_accumulate_add<bps::dtype::int8>)->Apply(reducer_sizes);
BENCHMARK(BM_accumulate_add<bps::dtype::uint8>)->Apply(reducer_sizes);
BENCHMARK(BM_accumulate_add<bps::dtype::int32>)->Apply(reducer_sizes);
BENCHMARK(BM_accumulate_add<bps::dtype::int64>)->Apply(reducer_sizes);
BENCHMARK(BM_sum_of<bps::dtype::float32>)->Arg(2)->Arg(4)->Arg(8);
BENCHMARK(BM_sum_of<bps::dtype::float16>)->Arg(2)->Arg(4)->Arg(8);
BENCHMARK(BM_sum_of<bps::dtype::bfloat16>)->Arg(4);
BENCHMARK(BM_accumulate_finish<bps::dtype::float16>)->Apply(reducer_sizes);
BENCHMARK(BM_accumulate_finish<bps::dtype::bfloat16>)->Apply(reducer_sizes);

// One push_pull's per-partition work on the worker, without the network: cut the tensor,
// hash each partition to a server, queue it, and drain the queue as the transport would
// (pop while the credit allows, mark one sent, pop again).
template <class S>
void BM_partition_schedule(benchmark::State& state) {
  const auto parts = static_cast<std::size_t>(state.range(0));
  bps::Config cfg;
  cfg.partition_bytes = 4096000;
  bps::partition::by_bytes partitioner(cfg);
  S scheduler = bps::make_scheduler<S>(cfg, partitioner.bound());
  const std::size_t tensor_bytes = parts * partitioner.bound();
  const int servers = 4;
  std::uint64_t order = 0;
  std::size_t checksum = 0;
  for (auto _ : state) {
    const std::uint64_t key = bps::tensor_key("layer.weight");
    auto ranges = partitioner.split(tensor_bytes, 4);
    for (std::uint32_t i = 0; i < ranges.size(); ++i) {
      checksum += static_cast<std::size_t>(bps::server_for(key, i, servers, cfg.key_hash));
      scheduler.push(bps::send_task{key, i, static_cast<int>(i % 3), order, ranges[i].bytes, nullptr});
    }
    ++order;
    std::vector<std::size_t> in_flight;
    in_flight.reserve(ranges.size());
    std::size_t done = 0;
    while (done < ranges.size()) {
      while (auto t = scheduler.pop()) in_flight.push_back(t->bytes);
      scheduler.sent(in_flight.back());
      in_flight.pop_back();
      ++done;
    }
    benchmark::DoNotOptimize(checksum);
  }
  const double n = static_cast<double>(state.iterations()) * static_cast<double>(parts);
  // CPU seconds per partition, printed with an SI prefix (e.g. "45.2ns").
  state.counters["per_partition"] =
      benchmark::Counter(n, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<std::int64_t>(n));
}

BENCHMARK(BM_partition_schedule<bps::schedule::priority>)->Arg(1)->Arg(16)->Arg(256)->Arg(4096);
BENCHMARK(BM_partition_schedule<bps::schedule::fifo>)->Arg(1)->Arg(16)->Arg(256)->Arg(4096);

void BM_wire_encode(benchmark::State& state) {
  bps::wire::header h;
  h.type = bps::wire::msg::push;
  h.key = 0x1234567890abcdefull;
  h.part = 7;
  h.payload_bytes = 4096000;
  h.tensor_bytes = 1u << 26;
  bps::wire::header_bytes out{};
  for (auto _ : state) {
    h.round++;
    bps::wire::encode(h, out);
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_wire_encode);

void BM_wire_decode(benchmark::State& state) {
  bps::wire::header h;
  h.type = bps::wire::msg::pull_response;
  h.key = 0x1234567890abcdefull;
  h.payload_bytes = 4096000;
  auto bytes = bps::wire::encode(h);
  for (auto _ : state) {
    benchmark::DoNotOptimize(bytes);
    auto r = bps::wire::decode(bytes, 1ull << 32);
    benchmark::DoNotOptimize(r.value.round);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_wire_decode);

// The hooks the communicator calls for one traced (or untraced) operation, without the network.
template <bool On>
void BM_trace_hooks(benchmark::State& state) {
  const auto parts = static_cast<std::uint32_t>(state.range(0));
  bps::Config cfg;
  cfg.trace_on = On;
  cfg.trace_start_step = 0;
  cfg.trace_end_step = 1 << 30;
  cfg.trace_dir = (std::filesystem::temp_directory_path() / "bps-micro-trace").string();
  bps::detail::tracer trace(cfg, bps::role::worker);
  trace.name_node(0, "worker 0", 0);
  std::vector<float> data(1024);
  bps::detail::op_state op;
  op.key = bps::tensor_key("layer.weight");
  op.data = std::as_writable_bytes(std::span(data));
  std::uint64_t round = 0;
  for (auto _ : state) {
    trace.begin(op, "layer.weight", round++, parts);
    for (std::uint32_t i = 0; i < parts; ++i) {
      trace.dispatched(op, i, static_cast<int>(i % 4));
      trace.sent(op, i, op.key, i);
      trace.answered(op, i, op.key, i);
    }
    op.finish(nullptr);
    benchmark::DoNotOptimize(op.trace);
  }
  const double n = static_cast<double>(state.iterations()) * static_cast<double>(parts);
  state.counters["per_partition"] =
      benchmark::Counter(n, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  std::filesystem::remove_all(cfg.trace_dir);
}
BENCHMARK(BM_trace_hooks<false>)->Arg(1)->Arg(16);
// On, every operation's events stay in memory until the end: a bounded number of operations.
BENCHMARK(BM_trace_hooks<true>)->Arg(1)->Arg(16)->Iterations(20000);

}  // namespace

BENCHMARK_MAIN();
