#pragma once
// train_mlp --async: the same model and data, trained asynchronously (BYTEPS_ENABLE_ASYNC=1,
// include/byteps/server/async_sum.hpp). The servers hold the parameters. A worker's first
// push_pull of each parameter tensor seeds it with rank 0's initial values (every worker gets
// them back); then each step computes the gradient on the worker's shard with the parameters it
// has, pushes its update, -lr/N x gradient (N updates then make one synchronous step's worth),
// and gets the servers' current parameters back at once, whatever the other workers are doing.
// With BYTEPS_ASYNC_STALENESS=s no worker runs more than s steps ahead of the slowest.
//
// Rank 0 prints one line per epoch: its own mean batch loss over the epoch (the synchronous run
// prints the mean over every worker's), and samples/s (its own steps times the global batch, per
// second). The synchronous run's exact checks do not apply (the order in which updates meet
// depends on timing); instead it checks: (a) rank 0's loss fell, (b) after a barrier (every
// update is in) and one push_pull of a zero update per tensor, every worker holds the servers'
// parameters, the same bits on every worker (compared by digest: a worker's first push_pull of
// a tensor returns rank 0's values, so a one-element tensor carries rank 0's digest to all).

#include <byteps/byteps.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "mlp.hpp"
#include "train_mlp_args.hpp"
#include "train_mlp_checks.hpp"

namespace train_mlp {

// Push_pulls every tensor of `p` (all started at once, then all awaited): in async mode, `p`
// holds this worker's updates going out and the servers' parameters coming back.
template <class Comm>
void exchange(Comm& comm, mlp::Params& p) {
  std::vector<bps::handle> hs;
  for (int l = 0; l < static_cast<int>(p.size()); ++l) {
    hs.push_back(comm.push_pull(tensor_name("params", l, "weight"), std::span<float>(p[l].w)));
    hs.push_back(comm.push_pull(tensor_name("params", l, "bias"), std::span<float>(p[l].b)));
  }
  for (auto& h : hs) h.wait();
}

template <class Comm>
int run_async(const bps::Config& cfg, const Args& args) {
  using clock_type = std::chrono::steady_clock;
  const mlp::Hyper& hp = args.hyper;
  const mlp::Dataset data = mlp::make_dataset(hp.seed, args.samples);
  Comm comm(cfg);
  const int rank = comm.rank(), n = comm.size();
  check_batch(hp, data, n);
  const int steps = mlp::steps_per_epoch(data.size(), n, hp.batch);
  mlp::Params params = mlp::init_params(hp.seed, mlp::layer_sizes(data, hp.hidden));
  if (rank == 0)
    std::printf("training asynchronously on %d workers (staleness %s): %d samples, global batch "
                "%d, %d steps/epoch per worker, lr %g, each update -lr/%d x gradient\n",
                n, cfg.async_staleness < 0 ? "unbounded" : std::to_string(cfg.async_staleness).c_str(),
                data.size(), hp.batch, steps, hp.lr, n);
  exchange(comm, params);  // the seed: every worker now holds rank 0's initial values
  mlp::Params update = mlp::zeros_like(params);
  const int layers = static_cast<int>(params.size());
  const float scale = -hp.lr / static_cast<float>(n);
  std::vector<double> epoch_loss;

  for (int epoch = 1; epoch <= hp.epochs; ++epoch) {
    const auto start = clock_type::now();
    double loss_sum = 0;
    for (int step = 0; step < steps; ++step) {
      const std::vector<int> idx = mlp::worker_batch(data.size(), n, hp.batch, rank, step);
      std::vector<bps::handle> pending;
      // Each layer's update goes out as soon as backward has its gradient; the answers (the
      // current parameters) land in `update` while backward still reads `params`.
      loss_sum += mlp::loss_and_grad(params, data, idx, update, [&](int l) {
        for (float& g : update[l].w) g *= scale;
        for (float& g : update[l].b) g *= scale;
        const bps::push_pull_options opt{.priority = layers - l};
        pending.push_back(
            comm.push_pull(tensor_name("params", l, "weight"), std::span<float>(update[l].w), opt));
        pending.push_back(
            comm.push_pull(tensor_name("params", l, "bias"), std::span<float>(update[l].b), opt));
      });
      for (auto& h : pending) h.wait();
      std::swap(params, update);  // the servers' parameters; `update` is overwritten next step
    }
    epoch_loss.push_back(loss_sum / steps);
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    if (rank == 0)
      std::printf("epoch %d/%d loss %.4f | %.0f samples/s | async\n", epoch, hp.epochs,
                  epoch_loss.back(), double(steps) * hp.batch / seconds);
    std::fflush(stdout);
  }

  comm.barrier();  // every worker's every update is in the servers' parameters
  for (auto& layer : params) {
    std::fill(layer.w.begin(), layer.w.end(), 0.0f);
    std::fill(layer.b.begin(), layer.b.end(), 0.0f);
  }
  exchange(comm, params);  // a zero update: the servers' final parameters
  const std::uint64_t mine = mlp::digest(params);
  std::vector<std::int64_t> rank0{static_cast<std::int64_t>(mine)};
  comm.push_pull("final.digest", std::span(rank0)).wait();  // its first use: rank 0's value
  comm.barrier();  // every worker is done with the cluster before any of them leaves

  if (rank == 0)
    std::printf("final parameters: digest %016llx\n", static_cast<unsigned long long>(mine));
  checks result;
  result.loss_fell(epoch_loss);
  const bool same = static_cast<std::uint64_t>(rank0[0]) == mine;
  result.report(same, same ? "parameters equal the servers' and rank 0's bit for bit"
                    : "parameters differ from rank 0's after the final pull");
  return result.finish(comm);
}

}  // namespace train_mlp
