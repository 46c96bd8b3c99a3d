// Data-parallel training of a libtorch model through byteps's libtorch plugin (run it with
// tools/byteps-launch, as train_mlp): bps::torch::DistributedOptimizer push_pulls each
// gradient as autograd produces it (first layers at the highest priority, which the
// scheduler follows with BYTEPS_SCHEDULING_PRIORITY=1), and steps the trainer's own
// torch::optim::SGD once the averaged gradients are in. Before training,
// broadcast_parameters and broadcast_optimizer_state give every worker rank 0's model and
// optimizer. At the end every worker checks that it holds rank 0's parameters bit for bit
// (FNV-1a digests of their bytes), and with --reference rank 0 checks the final loss against
// the same steps trained in one process over each global batch.
//
// Rank 0 prints one line per epoch:
//   loss      the mean over the epoch's steps of the workers' mean batch loss
//   samples/s global samples (sequences for the transformer) of the epoch / its wall time
//   hidden    1 - (time step() waited for the exchange after backward) / (the exchange's
//             span: from the first push_pull call to the last one done), summed over the
//             epoch: the share of the communication that overlapped the backward pass
//
//   byteps-launch --workers 2 --servers 2 -- train_torch --model cnn|transformer [...]

#include <byteps/byteps.hpp>
#include <byteps/torch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <malloc.h>

#include "../train_mlp_checks.hpp"
#include "args.hpp"
#include "data.hpp"
#include "models.hpp"

using DirectComm = bps::Communicator<>;
using HostComm = bps::Communicator<bps::transport::standard, bps::local::host>;

namespace {

using namespace train_torch;
using clock_type = std::chrono::steady_clock;

// How the distributed run's final loss may differ from the single-process run's, relative:
// the same arithmetic, summed in another order (per worker, then averaged on the servers).
constexpr double loss_tolerance = 1e-4;

// A model, its data set, and the mean loss of a batch.
struct Task {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const Dataset&)> loss;
  Dataset data;
};

Task make_task(const Args& a, uint64_t init_seed) {
  Task t;
  const int64_t samples = int64_t{a.batch} * a.steps;  // one epoch
  if (a.model == "cnn") {
    t.data = make_images(a.seed, samples);
    torch::manual_seed(init_seed);
    ResNet net;
    t.module = net.ptr();
    t.loss = [net](const Dataset& b) mutable {
      return torch::nn::functional::cross_entropy(net(b.inputs), b.targets);
    };
  } else {
    const LMShape shape{a.vocab, a.width, a.layers, 8, 4 * a.width, a.context};
    t.data = make_tokens(a.seed, samples, a.context, a.vocab);
    torch::manual_seed(init_seed);
    TransformerLM net(shape);
    t.module = net.ptr();
    t.loss = [net, v = a.vocab](const Dataset& b) mutable {
      return torch::nn::functional::cross_entropy(net(b.inputs).reshape({-1, v}),
                                                  b.targets.reshape({-1}));
    };
  }
  return t;
}

// FNV-1a over the bytes of every parameter, in the module's order.
std::int64_t digest(const torch::nn::Module& m) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& p : m.parameters()) {
    const torch::Tensor c = p.detach().contiguous();
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    for (std::size_t i = 0, n = c.numel() * c.element_size(); i < n; ++i)
      h = (h ^ b[i]) * 1099511628211ull;
  }
  return static_cast<std::int64_t>(h);
}

// Rank 0's digest, on every worker.
template <class Comm>
std::int64_t root_digest(Comm& comm, const std::string& name, std::int64_t mine) {
  std::int64_t d = mine;
  comm.broadcast(name, std::span<std::int64_t>(&d, 1), 0).wait();
  return d;
}

// One step's forward and backward passes on worker `rank` of `n`: its slice of the global
// batch in `passes` micro-batches, each loss scaled by 1/passes. Returns its mean loss.
double forward_backward(Task& t, const Args& a, int step, int rank, int n, int passes) {
  const int64_t local = a.batch / n, micro = local / passes;
  double loss = 0;
  for (int j = 0; j < passes; ++j) {
    const Dataset b = slice(t.data, int64_t{step} * a.batch + rank * local + j * micro, micro);
    torch::Tensor l = t.loss(b) / passes;
    l.backward();
    loss += l.item<double>();
  }
  return loss;
}

std::int64_t parameter_count(const torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

torch::optim::SGD make_sgd(const Task& t, double lr) {
  return torch::optim::SGD(t.module->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
}

// The same training in one process, one pass over each global batch: the final epoch's mean
// loss, and the largest relative difference of a parameter to `trained`'s.
std::pair<double, double> reference_run(const Args& a, const torch::nn::Module& trained) {
  Task t = make_task(a, static_cast<uint64_t>(a.seed));
  torch::optim::SGD sgd = make_sgd(t, a.lr);
  double last = 0;
  for (int e = 0; e < a.epochs; ++e) {
    double sum = 0;
    for (int s = 0; s < a.steps; ++s) {
      sgd.zero_grad();
      sum += forward_backward(t, a, s, 0, 1, 1);
      sgd.step();
    }
    last = sum / a.steps;
  }
  double rel = 0;
  const auto mine = t.module->parameters(), theirs = trained.parameters();
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const double scale = std::max(1e-6, mine[i].abs().max().item<double>());
    rel = std::max(rel, (mine[i] - theirs[i]).abs().max().item<double>() / scale);
  }
  return {last, rel};
}

template <class Comm>
int run(const bps::Config& cfg, const Args& a) {
  Comm comm(cfg);
  const int rank = comm.rank(), n = comm.size();
  if (a.batch % (n * a.backward_passes) != 0)
    throw bad_args("--batch " + std::to_string(a.batch) + " must be a multiple of the " +
                   std::to_string(n) + " workers times --backward-passes " +
                   std::to_string(a.backward_passes));
  torch::set_num_threads(a.threads);
  Task t = make_task(a, static_cast<uint64_t>(a.seed + (a.diverge_ranks ? rank : 0)));
  torch::optim::SGD sgd = make_sgd(t, a.lr * (a.diverge_ranks ? 1 + rank : 1));
  if (rank == 0)
    std::printf("training %s (%lld parameters, %.1f MB of gradients per step) on %d workers: "
                "global batch %d, %d steps/epoch, %d backward pass(es) per step, lr %g\n",
                a.model == "cnn" ? "a ResNet-style CNN on 3x32x32 images"
                                 : "a transformer language model",
                static_cast<long long>(parameter_count(*t.module)),
                parameter_count(*t.module) * 4 / 1e6, n, a.batch, a.steps, a.backward_passes, a.lr);
  train_mlp::checks result;

  // Every worker starts from rank 0's parameters and optimizer (its learning rate included).
  const std::int64_t own = digest(*t.module);
  const bool differed = root_digest(comm, "check.initial", own) != own;
  bps::torch::broadcast_parameters(comm, *t.module, 0);
  bps::torch::broadcast_optimizer_state(comm, sgd, 0);
  if (a.diverge_ranks) {
    const std::int64_t now = digest(*t.module);
    const double lr = sgd.param_groups()[0].options().get_lr();
    result.report(now == root_digest(comm, "check.broadcast", now) && lr == a.lr &&
                      (rank == 0 || differed),
                  std::string("broadcast_parameters and broadcast_optimizer_state made this "
                              "worker's parameters and learning rate rank 0's") +
                      (rank == 0 ? "" : " (they differed before)"));
  }

  bps::torch::DistributedOptimizer opt(comm, sgd, t.module->named_parameters(),
                                       {.backward_passes_per_step = a.backward_passes});
  std::vector<double> epoch_loss;
  for (int e = 1; e <= a.epochs; ++e) {
    const auto start = clock_type::now();
    double loss = 0, blocked = 0, span = 0;
    for (int s = 0; s < a.steps; ++s) {
      opt.zero_grad();
      loss += forward_backward(t, a, s, rank, n, a.backward_passes);
      opt.step();
      blocked += opt.last_exchange().blocked_seconds;
      span += opt.last_exchange().exchange_seconds;
    }
    std::vector<double> mean{loss / a.steps};
    comm.push_pull("check.loss", std::span<double>(mean), {.average = true}).wait();
    epoch_loss.push_back(mean[0]);
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    if (rank == 0)
      std::printf("epoch %d/%d loss %.6f | %.2f samples/s | %.0f%% of communication hidden "
                  "behind backward\n",
                  e, a.epochs, mean[0], double(a.steps) * a.batch / seconds,
                  span > 0 ? 100.0 * std::max(0.0, 1.0 - blocked / span) : 0.0);
    std::fflush(stdout);
  }

  const std::int64_t mine = digest(*t.module);
  const bool same = root_digest(comm, "check.final", mine) == mine;
  comm.barrier();  // every worker is done with the cluster before any of them leaves
  result.loss_fell(epoch_loss);
  result.report(same, same ? "parameters equal rank 0's bit for bit"
                           : "parameters differ from rank 0's: the workers diverged");
  if (rank == 0) {
    std::printf("final parameters: digest %016llx\n", static_cast<unsigned long long>(mine));
    if (a.reference) {
      const auto [ref_loss, rel] = reference_run(a, *t.module);
      char buf[200];
      const double diff = std::abs(epoch_loss.back() - ref_loss) / std::max(1.0, std::abs(ref_loss));
      std::snprintf(buf, sizeof buf,
                    "final loss %.6f is within %.0e of the single-process run's %.6f "
                    "(relative difference %.2e; parameters' %.2e)",
                    epoch_loss.back(), loss_tolerance, ref_loss, diff, rel);
      result.report(diff <= loss_tolerance, buf);
    }
  }
  std::fflush(stdout);
  return result.finish(comm);
}

}  // namespace

int main(int argc, char** argv) {
  // glibc serves blocks above its mmap threshold (128 KiB at first, raised only as such blocks
  // are freed) with fresh pages, and gives the free top of its heap back to the kernel: a
  // trainer that makes and frees its activations every step then pays page faults in every
  // step. A fixed 32 MiB threshold (glibc's largest) and a 256 MiB trim threshold keep them in
  // the heap (docs/performance.md, "libtorch").
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  try {
    const Args args = parse_args(argc, argv);
    if (args.help) {
      std::fputs(usage, stdout);
      return 0;
    }
    if (args.width % 8 != 0) throw bad_args("--width must be a multiple of the 8 heads");
    const bps::Config cfg = bps::Config::from_env();
    if (cfg.enable_async)
      throw bad_args("BYTEPS_ENABLE_ASYNC=1: train_torch trains synchronously (the plugin's "
                     "async mode is distributed_options::async)");
    return cfg.local_size > 1 ? run<HostComm>(cfg, args) : run<DirectComm>(cfg, args);
  } catch (const bad_args& e) {
    std::fprintf(stderr, "train_torch: %s\n%s", e.what(), usage);
    return 2;
  } catch (const bps::error& e) {
    std::fprintf(stderr, "train_torch: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_torch: unexpected error: %s\n", e.what());
    return 1;
  }
}
