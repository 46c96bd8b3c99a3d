#pragma once
// train_mlp under elastic training (BYTEPS_MIN_NUM_WORKER or BYTEPS_MAX_NUM_WORKER set; see
// docs/reliability.md, "Elastic training"): the same model, data and steps as the synchronous
// run, on workers that may be lost while it trains. A lost worker is removed by the scheduler;
// the rounds it was part of start over without it, and every later step averages the gradients
// of the workers left. Each worker keeps its shard of the data (the one of its rank when the
// job formed) and asks `step_boundary()` before each step, where it sees the change: rank 0
// prints it, with how long the step during which it happened took.
//
// A train_mlp started while the job runs (with the same options) joins it: every worker stops
// at one step, the newcomer gets the parameters (registered with `register_state`) and where
// the run stands (`on_state`: the step, the epoch's loss so far), and from that step on every
// worker's batch is its shard of the grown job (every worker sees the join at that step).
//
// --die-at-step K makes the worker of the highest rank end itself with SIGKILL at the start of
// global step K (counted from 0 over all epochs), before it pushes anything of that step; the
// scheduler removes its whole machine (with several local ranks its siblings fail too). A clean
// cut: steps before K sum every worker and steps from K on the other machines'. The end checks
// are then those of the synchronous run against a reference that replays exactly that: (a) the
// loss fell, (b) every worker left holds rank 0's parameters bit for bit, (c) they equal, bit
// for bit, a single-process replay that sums each step's per-process gradients on each machine
// in local-rank order, the machines' sums in machine order, over those that contributed, and
// averages them with bps::reduce::scale, as the local stages, servers and workers do.
// With a join, (c)'s replay adds the new machine at the step it joined and splits the batch
// anew there.

#include <byteps/byteps.hpp>
#include <byteps/reduce/reducer.hpp>

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlp.hpp"
#include "train_mlp_args.hpp"
#include "train_mlp_checks.hpp"

namespace train_mlp {

// Adds `b` into `a`, element by element, as a server or a machine's local stage adds a push.
inline void add_into(mlp::Params& a, const mlp::Params& b) {
  for (std::size_t l = 0; l < a.size(); ++l) {
    for (std::size_t i = 0; i < a[l].w.size(); ++i) a[l].w[i] += b[l].w[i];
    for (std::size_t i = 0; i < a[l].b.size(); ++i) a[l].b[i] += b[l].b[i];
  }
}

// The gradient every worker applies at a step where `machines` (ascending) contributed, each
// with `local_size` processes whose batches are shards of `shard_size` (process l of the i-th
// machine in `ranked` has rank i * local_size + l): each process's mean gradient over its batch,
// summed on its machine in local-rank order (the local stage), the machines' sums added in
// machine order (the servers' rank order), times 1 / the processes that contributed.
inline void elastic_step_gradient(const mlp::Params& p, const mlp::Dataset& d, const mlp::Hyper& h,
                                  int shard_size, int local_size, const std::vector<int>& machines,
                                  int step, mlp::Params& sum, mlp::Params& machine_sum,
                                  mlp::Params& scratch) {
  bool first_machine = true;
  for (int m : machines) {
    mlp::Params& into = first_machine ? sum : machine_sum;
    for (int l = 0; l < local_size; ++l) {
      const std::vector<int> idx =
          mlp::worker_batch(d.size(), shard_size, h.batch, m * local_size + l, step);
      mlp::loss_and_grad(p, d, idx, l == 0 ? into : scratch);
      if (l > 0) add_into(into, scratch);
    }
    if (!first_machine) add_into(sum, machine_sum);
    first_machine = false;
  }
  const double factor = 1.0 / static_cast<double>(machines.size() * local_size);
  for (auto& layer : sum) {
    bps::reduce::scale(layer.w.data(), layer.w.size(), bps::dtype::float32, factor);
    bps::reduce::scale(layer.b.data(), layer.b.size(), bps::dtype::float32, factor);
  }
}

// The single-process replay of a run of `formed` worker processes, `local_size` per machine,
// where the last machine is gone from global step `die_at` on (never, when die_at < 0), or a
// new machine (the next number, `local_size` processes) took part from global step `join_at` on
// (never, when join_at < 0), every worker's batch then a shard of the new size.
inline mlp::Params train_elastic_reference(const mlp::Dataset& d, const mlp::Hyper& h, int formed,
                                           int local_size, int die_at, int join_at = -1) {
  mlp::Params p = mlp::init_params(h.seed, mlp::layer_sizes(d, h.hidden));
  mlp::Params sum = mlp::zeros_like(p), machine_sum = mlp::zeros_like(p),
              scratch = mlp::zeros_like(p);
  const int steps = mlp::steps_per_epoch(d.size(), formed, h.batch);
  std::vector<int> all(static_cast<std::size_t>(formed / local_size));
  for (std::size_t m = 0; m < all.size(); ++m) all[m] = static_cast<int>(m);
  const std::vector<int> survivors(all.begin(), all.end() - 1);
  std::vector<int> grown = all;
  grown.push_back(static_cast<int>(all.size()));
  for (int e = 0; e < h.epochs; ++e)
    for (int step = 0; step < steps; ++step) {
      const int global = e * steps + step;
      const bool gone = die_at >= 0 && global >= die_at;
      const bool joined = join_at >= 0 && global >= join_at;
      elastic_step_gradient(p, d, h, joined ? formed + local_size : formed, local_size,
                            joined ? grown : gone ? survivors : all, step, sum, machine_sum,
                            scratch);
      mlp::sgd(p, sum, h.lr);
    }
  return p;
}

inline bool same_bits(const mlp::Layer& a, const mlp::Layer& b) {
  return a.w.size() == b.w.size() && a.b.size() == b.b.size() &&
         std::memcmp(a.w.data(), b.w.data(), a.w.size() * sizeof(float)) == 0 &&
         std::memcmp(a.b.data(), b.b.data(), a.b.size() * sizeof(float)) == 0;
}

// What a worker joining the run is given besides the parameters (registered with the
// communicator): where the run stands. Sent as bytes by the worker chosen to send it.
struct run_position {
  std::int32_t formed = 0;     // worker processes when the job formed
  std::int32_t global = 0;     // the global step the joiner trains first
  std::int32_t join_at = -1;   // the first join's step (-1: none before this one)
  std::int32_t replayable = 1;  // the reference can replay the run's changes so far
  double loss_sum = 0;         // this epoch's loss so far
  std::vector<double> epoch_loss;

  std::vector<std::byte> save() const {
    std::vector<std::byte> out(4 * sizeof(std::int32_t) + sizeof(double) * (1 + epoch_loss.size()));
    std::byte* at = out.data();
    for (std::int32_t v : {formed, global, join_at, replayable}) {
      std::memcpy(at, &v, sizeof v);
      at += sizeof v;
    }
    std::memcpy(at, &loss_sum, sizeof loss_sum);
    if (!epoch_loss.empty())
      std::memcpy(at + sizeof(double), epoch_loss.data(), epoch_loss.size() * sizeof(double));
    return out;
  }
  void load(std::span<const std::byte> in) {
    const std::size_t head = 4 * sizeof(std::int32_t) + sizeof(double);
    if (in.size() < head || (in.size() - head) % sizeof(double) != 0)
      throw std::runtime_error("train_mlp: the run position sent to this joining worker has " +
                               std::to_string(in.size()) + " bytes");
    std::int32_t v[4];
    std::memcpy(v, in.data(), sizeof v);
    formed = v[0];
    global = v[1];
    join_at = v[2];
    replayable = v[3];
    std::memcpy(&loss_sum, in.data() + sizeof v, sizeof loss_sum);
    epoch_loss.resize((in.size() - head) / sizeof(double));
    if (!epoch_loss.empty())
      std::memcpy(epoch_loss.data(), in.data() + head, epoch_loss.size() * sizeof(double));
  }
};

template <class Comm>
int run_elastic(const bps::Config& cfg, const Args& args) {
  using clock_type = std::chrono::steady_clock;
  const mlp::Hyper& hp = args.hyper;
  const mlp::Dataset data = mlp::make_dataset(hp.seed, args.samples);
  Comm comm(cfg);
  const int local_size = comm.local_size();
  mlp::Params params = mlp::init_params(hp.seed, mlp::layer_sizes(data, hp.hidden));
  mlp::Params grad = mlp::zeros_like(params);
  const int layers = static_cast<int>(params.size());
  // A worker that joins later is given the parameters and where the run stands.
  run_position at;
  at.formed = comm.size();
  for (int l = 0; l < layers; ++l) {
    comm.register_state(tensor_name("params", l, "weight"), std::span<float>(params[l].w));
    comm.register_state(tensor_name("params", l, "bias"), std::span<float>(params[l].b));
  }
  comm.on_state([&] { return at.save(); }, [&](std::span<const std::byte> in) { at.load(in); });
  const bool joiner = comm.joined_running_job();
  int shard_rank = comm.rank(), shard_size = comm.size();
  if (joiner) {
    const auto joined = comm.step_boundary();  // loads the parameters and `at`
    shard_rank = joined->rank;
    shard_size = joined->size;
    if (at.join_at >= 0) at.replayable = 0;  // the second join
    at.join_at = at.global;
    std::printf("worker %d: joined the running job at step %d: rank %d of %d\n", comm.machine(),
                at.global, joined->rank, joined->size);
  }
  const int formed = at.formed, formed_rank = joiner ? -1 : comm.rank();
  check_batch(hp, data, formed);
  const int steps = mlp::steps_per_epoch(data.size(), formed, hp.batch);
  if (args.die_at_step >= steps * hp.epochs)
    throw bad_args("--die-at-step " + std::to_string(args.die_at_step) + ": the run has only " +
                   std::to_string(steps * hp.epochs) + " steps (0 .. " +
                   std::to_string(steps * hp.epochs - 1) + ")");
  // The last process dies; the scheduler then removes its whole machine.
  const bool dies = args.die_at_step >= 0 && formed_rank == formed - 1;
  if (formed_rank == 0)
    std::printf("elastic training (BYTEPS_MIN_NUM_WORKER=%d): %d workers, %d steps/epoch%s\n",
                cfg.fewest_workers(), formed, steps,
                args.die_at_step >= 0
                    ? (", worker " + std::to_string(formed - 1) + " dies at step " +
                       std::to_string(args.die_at_step))
                          .c_str()
                    : "");
  bool seen_own_join = joiner;
  bool joined_agree = true;  // at the step of each join
  bool lost_unplanned = false;  // a worker was lost that --die-at-step did not end
  int removal_seen_at = -1;     // the step at whose boundary this worker saw the first removal
  for (int global = at.global; global < steps * hp.epochs; ++global) {
    const int epoch = global / steps + 1, step = global % steps;
    if (step == 0) at.loss_sum = 0;
    at.global = global;
    if (dies && global == args.die_at_step) {
      std::printf("worker %d: ending itself with SIGKILL at step %d\n", formed_rank, global);
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    const auto began = clock_type::now();
    if (std::exchange(seen_own_join, false)) {
      // A worker that joined saw its join above, at this step's boundary.
    } else if (const auto change = comm.step_boundary()) {
      lost_unplanned = lost_unplanned || (!change->removed.empty() && args.die_at_step < 0);
      if (!change->removed.empty() && removal_seen_at < 0) removal_seen_at = global;
      if (!change->joined.empty()) {
        // Every worker sees a join at this same step: the batch is split anew.
        if (at.join_at >= 0) at.replayable = 0;
        at.join_at = global;
        shard_rank = change->rank;
        shard_size = change->size;
        check_batch(hp, data, shard_size);
      }
      if (comm.rank() == 0) {
        if (!change->joined.empty())
          std::printf("step %d: membership epoch %llu, worker machine %d joined: %d workers\n",
                      global, static_cast<unsigned long long>(change->epoch),
                      change->joined.back(), change->size);
        if (!change->removed.empty())
          std::printf("step %d: membership epoch %llu, %d of %d workers go on (removed: machine "
                      "%d, %s)\n",
                      global, static_cast<unsigned long long>(change->epoch), change->size,
                      change->old_size, change->removed.back(), change->why.c_str());
      }
    }
    const std::vector<int> idx =
        mlp::worker_batch(data.size(), shard_size, hp.batch, shard_rank, step);
    std::vector<bps::handle> pending;
    at.loss_sum += mlp::loss_and_grad(params, data, idx, grad, [&](int l) {
      const bps::push_pull_options opt{.priority = layers - l, .average = true};
      pending.push_back(
          comm.push_pull(tensor_name("grad", l, "weight"), std::span<float>(grad[l].w), opt));
      pending.push_back(
          comm.push_pull(tensor_name("grad", l, "bias"), std::span<float>(grad[l].b), opt));
    });
    for (auto& h : pending) h.wait();
    mlp::sgd(params, grad, hp.lr);
    if (global == at.join_at) {
      // The step a worker joined at: from it on, every worker holds rank 0's parameters.
      mlp::Params root = params;
      std::vector<bps::handle> hs;
      for (int l = 0; l < layers; ++l) {
        hs.push_back(comm.broadcast(tensor_name("joined", l, "weight"),
                                    std::span<float>(root[l].w), 0));
        hs.push_back(comm.broadcast(tensor_name("joined", l, "bias"),
                                    std::span<float>(root[l].b), 0));
      }
      for (auto& h : hs) h.wait();
      for (int l = 0; l < layers; ++l)
        joined_agree = joined_agree && same_bits(root[l], params[l]);
    }
    if (args.die_at_step >= 0 && global == args.die_at_step && comm.rank() == 0)
      std::printf("step %d, the first without machine %d, took %.0f ms\n", global,
                  comm.machines() - 1,
                  std::chrono::duration<double, std::milli>(clock_type::now() - began).count());
    if (step == steps - 1) {
      std::vector<float> loss{static_cast<float>(at.loss_sum / steps)};
      comm.push_pull("loss", std::span<float>(loss), {.priority = 0, .average = true}).wait();
      at.epoch_loss.push_back(loss[0]);
      if (comm.rank() == 0) std::printf("epoch %d/%d loss %.4f\n", epoch, hp.epochs, loss[0]);
      std::fflush(stdout);
    }
  }
  at.global = steps * hp.epochs;
  if (const auto change = comm.step_boundary(); change && comm.rank() == 0)
    std::printf("after the last step: %d of %d workers went on\n", change->size, change->old_size);

  mlp::Params root = params;
  std::vector<bps::handle> hs;
  for (int l = 0; l < layers; ++l) {
    hs.push_back(comm.broadcast(tensor_name("params", l, "weight"), std::span<float>(root[l].w), 0));
    hs.push_back(comm.broadcast(tensor_name("params", l, "bias"), std::span<float>(root[l].b), 0));
  }
  for (auto& h : hs) h.wait();
  bool same = true, exact = true;
  const mlp::Params reference =
      train_elastic_reference(data, hp, formed, local_size, args.die_at_step, at.join_at);
  for (int l = 0; l < layers; ++l) {
    same = same && same_bits(root[static_cast<std::size_t>(l)], params[static_cast<std::size_t>(l)]);
    exact = exact &&
            same_bits(reference[static_cast<std::size_t>(l)], params[static_cast<std::size_t>(l)]);
  }
  // Every worker saw the removal at the same step (the boundary the scheduler had them agree
  // on): the sum of each one's step + 1 is then the job's size times its own.
  std::vector<float> seen_at{static_cast<float>(removal_seen_at + 1)};
  comm.push_pull("removal_seen_at", std::span<float>(seen_at)).wait();
  const bool seen_together = seen_at[0] == static_cast<float>(comm.size() * (removal_seen_at + 1));
  comm.barrier();
  if (comm.rank() == 0)
    std::printf("final parameters: digest %016llx\n",
                static_cast<unsigned long long>(mlp::digest(params)));
  checks result;
  result.loss_fell(at.epoch_loss);
  result.report(same, same ? "parameters equal rank 0's bit for bit"
                           : "parameters differ from rank 0's: the workers diverged");
  if (at.join_at >= 0)
    result.report(joined_agree,
                  joined_agree ? "parameters equal rank 0's bit for bit after the step a worker "
                                 "joined at (step " + std::to_string(at.join_at) + ")"
                               : "parameters differ from rank 0's after a worker joined");
  if (removal_seen_at >= 0 || !seen_together)
    result.report(seen_together,
                  seen_together ? "every worker saw the removal at the same step (step " +
                                      std::to_string(removal_seen_at) + ")"
                                : "the workers saw the removal at different steps");
  if (lost_unplanned)
    result.skip("parameters equal the elastic reference: a worker was lost at a step this run "
                "does not know (killed from outside), so the replay cannot drop it there");
  else if (!at.replayable || (at.join_at >= 0 && args.die_at_step >= 0))
    result.report(false, "the elastic reference replays one loss or one join, and this run had "
                         "more");
  else
    result.report(exact, exact ? "parameters equal the elastic reference bit for bit (the same "
                                 "workers summed at each step)"
                               : "parameters differ from the elastic reference");
  return result.finish(comm);
}

}  // namespace train_mlp
