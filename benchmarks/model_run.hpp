#pragma once
// `--model NAME` for bps-bench and gloo-allreduce: one iteration is the communication of one
// backward pass over a real network's gradients (model_mix.hpp). Each rank holds every
// parameter tensor in its own allocation, as a framework does; one iteration fills them all
// (untimed), meets the other ranks at a barrier, then runs the system's step over all tensors,
// timed; then every tensor is compared with the exact sum (bench::values, float32).
//
// Output, rank 0 on stdout:
//   # model resnet50: 161 tensors, 25557032 parameters (102.2 MB fp32)
//   #system            p50_ms     p99_ms   wrong
//   byteps             ...
// p50 and p99 of the slowest rank's time per iteration over --iters (after --warmup).

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common.hpp"
#include "model_mix.hpp"

namespace bench {

/// Help text for --model, the same in every program that takes it.
inline const char* model_help() {
  return "  --model NAME       instead of the sweep: the gradients of one backward pass of\n"
         "                     NAME (resnet50: 161 tensors, 25.6 M parameters; vgg16: 32\n"
         "                     tensors, 138.4 M), float32, per iteration; --iters, --warmup,\n"
         "                     --check and --label apply; --min-bytes, --max-bytes,\n"
         "                     --step-factor and --dtype are refused\n";
}

/// Parses --model's value; an unknown name is a usage error naming the valid ones.
inline model::mix parse_model(std::string_view name) {
  auto m = model::by_name(name);
  if (!m)
    throw usage_error("--model '" + std::string(name) + "': unknown model; expected one of " +
                      std::string(model::known_names));
  return *m;
}

/// The sweep's sizes and dtypes would change what a mix measures (its sizes are the model's,
/// its dtype float32): refuse them rather than ignore them. --topology, --link-gbps and
/// --servers only shape the sweep's time/bound column, which a mix does not print.
inline void validate_for_model(const options& o) {
  const options defaults;
  if (o.min_bytes != defaults.min_bytes || o.max_bytes != defaults.max_bytes ||
      o.step_factor != defaults.step_factor)
    throw usage_error(
        "--model: the sizes are the model's; --min-bytes, --max-bytes and "
        "--step-factor do not apply");
  if (o.dtypes != defaults.dtypes)
    throw usage_error("--model: the gradients are float32; --dtype does not apply");
}

/// One parameter tensor of the mix in this rank's memory.
struct mix_tensor {
  std::string name;
  float* data = nullptr;
  std::size_t count = 0;
  /// Forward position, negated: the first layer's tensors have the highest priority, since
  /// the next forward pass needs them first (what push_pull_options::priority asks for).
  int priority = 0;
};

/// Every tensor of a mix, each in its own 64-byte aligned allocation. Throws
/// std::logic_error when the mix's generator disagrees with the published counts: a result
/// for the wrong mix would be mislabelled.
class mix_memory {
 public:
  explicit mix_memory(const model::mix& m) {
    model::check_published_counts(m);
    for (std::size_t i = 0; i < m.tensors.size(); ++i) {
      const auto& p = m.tensors[i];
      buffers_.push_back(std::make_unique<aligned_buffer>(p.elements() * sizeof(float)));
      tensors_.push_back({m.name + "." + p.name, reinterpret_cast<float*>(buffers_.back()->p),
                          p.elements(), -static_cast<int>(i)});
    }
  }
  /// Forward order; a backward pass walks them from the back.
  std::span<const mix_tensor> tensors() const { return tensors_; }

 private:
  std::vector<std::unique_ptr<aligned_buffer>> buffers_;
  std::vector<mix_tensor> tensors_;
};

/// The communication of one backward pass: sums every tensor over all ranks, in place, and
/// returns when all are done.
using mix_step = std::function<void(std::span<const mix_tensor>)>;

/// For an all-reduce library with a blocking collective: one all-reduce per tensor, from the
/// last layer to the first, as gradients become ready in a backward pass.
inline mix_step per_tensor_step(backend& b) {
  return [&b](std::span<const mix_tensor> tensors) {
    for (auto t = tensors.rbegin(); t != tensors.rend(); ++t)
      b.all_reduce(t->data, t->count, bps::dtype::float32);
  };
}

/// As Horovod's tensor fusion: every tensor copied into one buffer, one all-reduce, the sums
/// copied back (the copies are part of the step). Horovod's default threshold (64 MiB) would
/// cut a mix this large into a few fused buffers; one is the best case for the all-reduce.
inline mix_step fused_step(backend& b, std::span<const mix_tensor> tensors) {
  std::size_t total = 0;
  for (const auto& t : tensors) total += t.count;
  auto fused = std::make_shared<aligned_buffer>(total * sizeof(float));
  return [&b, fused, total](std::span<const mix_tensor> ts) {
    auto* out = reinterpret_cast<float*>(fused->p);
    std::size_t at = 0;
    for (auto t = ts.rbegin(); t != ts.rend(); at += t->count, ++t)
      std::memcpy(out + at, t->data, t->count * sizeof(float));
    b.all_reduce(out, total, bps::dtype::float32);
    at = 0;
    for (auto t = ts.rbegin(); t != ts.rend(); at += t->count, ++t)
      std::memcpy(t->data, out + at, t->count * sizeof(float));
  };
}

struct mix_result {
  double p50_s = 0, p99_s = 0;
  double wrong = 0;  // elements, over all ranks and iterations
};

/// --warmup then --iters backward passes of `step` over `memory`; every rank calls it. The
/// result is the same on every rank.
inline mix_result run_mix(const options& o, backend& b, const mix_memory& memory,
                          const mix_step& step) {
  using clock = std::chrono::steady_clock;
  values vals(bps::dtype::float32, b.size);
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(o.iters));
  double wrong = 0;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    for (const auto& t : memory.tensors()) vals.fill(t.data, t.count, b.rank, it);
    b.barrier();
    const auto t0 = clock::now();
    step(memory.tensors());
    const auto t1 = clock::now();
    if (it >= o.warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (o.check)
      for (const auto& t : memory.tensors())
        wrong += static_cast<double>(vals.count_wrong(t.data, t.count, it));
  }
  const auto [slowest, all_wrong] = combine_ranks(b, times, wrong);
  return {percentile(slowest, 0.50), percentile(slowest, 0.99), all_wrong};
}

inline void print_mix_header(std::FILE* out, const options& o, const backend& b,
                             const model::mix& m) {
  const double bytes = static_cast<double>(m.parameters() * sizeof(float));
  std::fprintf(out, "# model %s: %zu tensors, %zu parameters (%.1f MB fp32)\n", m.name.c_str(),
               m.tensors.size(), m.parameters(), bytes / 1e6);
  std::fprintf(out, "# %s%s%s: %d ranks", b.name.c_str(), o.label.empty() ? "" : " ",
               o.label.c_str(), b.size);
  if (b.servers > 0) std::fprintf(out, ", %d servers", b.servers);
  std::fprintf(out, ", %d iters + %d warmup, check %s\n", o.iters, o.warmup,
               o.check ? "on" : "off");
  std::fprintf(out,
               "# one iteration: every gradient of a backward pass (last layer first), time of "
               "the slowest rank; MB = 1e6 bytes\n");
  std::fprintf(out, "#%-17s %10s %10s %7s\n", "system", "p50_ms", "p99_ms", "wrong");
  std::fflush(out);
}

inline void print_mix_row(std::FILE* out, std::string_view system, const mix_result& r) {
  std::fprintf(out, "%-18s %10.2f %10.2f %7.0f\n", std::string(system).c_str(), r.p50_s * 1e3,
               r.p99_s * 1e3, r.wrong);
  std::fflush(out);
}

}  // namespace bench
