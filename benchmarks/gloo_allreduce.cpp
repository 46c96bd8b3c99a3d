// gloo-allreduce: Gloo's ring all-reduce (Debian's libgloo-dev: TCP transport, FileStore
// rendezvous, the gloo::allreduce function API with AllreduceOptions::Algorithm::RING), swept
// over the same sizes and printed in the same columns as bps-bench (see common.hpp). With
// --model, a real network's gradients per iteration instead (model_run.hpp), all-reduced two
// ways: one all-reduce per tensor, and fused into one buffer as Horovod does.
//
// Start one process per rank; they meet through files in --store (a directory every rank can
// see: on one machine, also across network namespaces, any local directory works).
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "common.hpp"
#include "model_run.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "gloo-allreduce: Gloo ring all-reduce sweep (TCP), bps-bench's columns.\n\n"
               "Usage: gloo-allreduce --rank R --size N --store DIR [--host ADDR] [options]\n"
               "  (RANK, SIZE, GLOO_STORE, GLOO_HOST, GLOO_PREFIX are read when the flags are not given)\n\n"
               "  --rank R           this process's rank, 0 .. N-1\n"
               "  --size N           number of ranks\n"
               "  --store DIR        rendezvous directory shared by the ranks (FileStore); use a\n"
               "                     fresh one per run, or a fresh --prefix\n"
               "  --prefix P         key prefix inside the store (default: gloo-bench)\n"
               "  --host ADDR        local address to bind and advertise (default 127.0.0.1)\n"
               "  --timeout-s S      Gloo's per-operation timeout (default 300)\n"
               "%s%s"
               "                     Two rows: gloo-per-tensor (one ring all-reduce per tensor,\n"
               "                     last layer first) and gloo-fused (every tensor copied into\n"
               "                     one buffer, one all-reduce, copied back; the copies are\n"
               "                     timed), then a comment naming the better of the two\n"
               "  --help             print this help\n\n"
               "Example, 2 ranks on loopback:\n"
               "  d=$(mktemp -d); for r in 0 1; do gloo-allreduce --rank $r --size 2 --store $d & done; wait\n",
               bench::common_help(), bench::model_help());
}

template <class T>
void reduce_sum(void* c, const void* a, const void* b, std::size_t n) {
  gloo::sum<T>(c, a, b, n);
}

gloo::AllreduceOptions::Func sum_for(bps::dtype t) {
  switch (t) {
    case bps::dtype::float32: return &reduce_sum<float>;
    case bps::dtype::float64: return &reduce_sum<double>;
    case bps::dtype::float16: return &reduce_sum<gloo::float16>;
    case bps::dtype::int8: return &reduce_sum<std::int8_t>;
    case bps::dtype::uint8: return &reduce_sum<std::uint8_t>;
    case bps::dtype::int32: return &reduce_sum<std::int32_t>;
    case bps::dtype::int64: return &reduce_sum<std::int64_t>;
    case bps::dtype::bfloat16: break;  // Gloo has no bfloat16
  }
  return {};
}

// --model: the mix per tensor, then fused, in the same job; rank 0 prints both rows and which
// is better (the one a user of Gloo would pick). Returns the wrong elements over all ranks.
double model_mix_runs(const bench::options& opts, bench::backend& b,
                      const bench::model::mix& model) {
  const bench::mix_memory memory(model);
  if (b.rank == 0) bench::print_mix_header(stdout, opts, b, model);
  struct variant {
    const char* system;
    bench::mix_step step;
    bench::mix_result result{};
  };
  variant variants[] = {{"gloo-per-tensor", bench::per_tensor_step(b)},
                        {"gloo-fused", bench::fused_step(b, memory.tensors())}};
  double wrong = 0;
  for (auto& v : variants) {
    v.result = bench::run_mix(opts, b, memory, v.step);
    wrong += v.result.wrong;
    if (b.rank != 0) continue;
    bench::print_mix_row(stdout, v.system, v.result);
    std::fprintf(stderr, "gloo-allreduce: %s %s done (p50 %.2f ms)\n", model.name.c_str(), v.system,
                 v.result.p50_s * 1e3);
  }
  if (b.rank == 0) {
    const auto& best =
        variants[0].result.p50_s <= variants[1].result.p50_s ? variants[0] : variants[1];
    std::printf("# better: %s (p50 %.2f ms)\n", best.system, best.result.p50_s * 1e3);
    std::fflush(stdout);
  }
  return wrong;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  bench::options opts;
  opts.topo = bench::topology::ring;
  int rank = env("RANK") ? std::atoi(env("RANK")) : -1;
  int size = env("SIZE") ? std::atoi(env("SIZE")) : -1;
  std::string store_dir = env("GLOO_STORE") ? env("GLOO_STORE") : "";
  std::string host = env("GLOO_HOST") ? env("GLOO_HOST") : "127.0.0.1";
  std::string prefix = env("GLOO_PREFIX") ? env("GLOO_PREFIX") : "gloo-bench";
  int timeout_s = 300;
  std::optional<bench::model::mix> model;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a == "--help" || a == "-h") {
        usage(stdout);
        return 0;
      }
      if (bench::parse_common(opts, argc, argv, i)) continue;
      if (i + 1 >= argc) throw bench::usage_error(std::string(a) + " needs a value or is unknown (see --help)");
      std::string v = argv[++i];
      if (a == "--rank") rank = std::atoi(v.c_str());
      else if (a == "--size") size = std::atoi(v.c_str());
      else if (a == "--store") store_dir = v;
      else if (a == "--prefix") prefix = v;
      else if (a == "--host") host = v;
      else if (a == "--timeout-s") timeout_s = std::atoi(v.c_str());
      else if (a == "--model") model = bench::parse_model(v);
      else throw bench::usage_error("unknown flag '" + std::string(a) + "' (see --help)");
    }
    bench::validate(opts);
    if (model) bench::validate_for_model(opts);
    if (size < 1 || rank < 0 || rank >= size)
      throw bench::usage_error("need --size N >= 1 and --rank 0 .. N-1");
    if (store_dir.empty()) throw bench::usage_error("need --store DIR (a directory shared by the ranks)");
    if (timeout_s < 1) throw bench::usage_error("--timeout-s must be >= 1");
  } catch (const bench::usage_error& e) {
    std::fprintf(stderr, "gloo-allreduce: %s\n", e.what());
    return 2;
  }

  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    attr.ai_family = AF_INET;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store(prefix, file_store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(std::chrono::seconds(timeout_s));
    context->connectFullMesh(store, device);

    std::uint32_t tag = 0;
    bench::backend b;
    b.name = "gloo";
    b.rank = rank;
    b.size = size;
    b.supports = [](bps::dtype t) { return static_cast<bool>(sum_for(t)); };
    b.all_reduce = [&](void* data, std::size_t count, bps::dtype t) {
      gloo::AllreduceOptions o(context);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      // Typed only for the element size; the reduce function carries the real type.
      switch (bps::dtype_size(t)) {
        case 1: o.setOutput(static_cast<std::uint8_t*>(data), count); break;
        case 2: o.setOutput(static_cast<std::uint16_t*>(data), count); break;
        case 4: o.setOutput(static_cast<std::uint32_t*>(data), count); break;
        default: o.setOutput(static_cast<std::uint64_t*>(data), count); break;
      }
      o.setReduceFunction(sum_for(t));
      o.setTag(++tag);
      gloo::allreduce(o);
    };
    b.barrier = [&] {
      gloo::BarrierOptions o(context);
      o.setTag(++tag);
      gloo::barrier(o);
    };
    b.sum_doubles = [&](std::vector<double>& v) {
      gloo::AllreduceOptions o(context);
      o.setOutput(v.data(), v.size());
      o.setReduceFunction(&reduce_sum<double>);
      o.setTag(++tag);
      gloo::allreduce(o);
    };
    if (rank == 0) std::fprintf(stderr, "gloo-allreduce: %d ranks on %s, ring\n", size, host.c_str());
    const double wrong = model ? model_mix_runs(opts, b, *model) : bench::run_sweep(opts, b);
    b.barrier();
    if (wrong != 0) {
      if (rank == 0) std::fprintf(stderr, "gloo-allreduce: %.0f wrong elements\n", wrong);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-allreduce (rank %d): %s\n", rank, e.what());
    return 1;
  }
}
