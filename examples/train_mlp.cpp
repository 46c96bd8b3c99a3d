// Data-parallel training of an MLP through byteps (run it with tools/byteps-launch): every
// worker trains on its shard, push_pulls each layer's gradient as soon as backward has computed
// it (the first layer, needed first by the next forward pass, at the highest priority), and
// applies the averaged gradient. At the end it checks that the loss fell, that all workers hold
// the same parameters bit for bit, and that they match a single-process reference run.
// Rank 0 prints a digest of the final parameters (FNV-1a over their bytes), so that two runs
// can be compared bit for bit (tests/process/failover_main_job.sh does, with a server killed).
//
// Two models (--model): `large`, the default and the main job's, has 3 hidden layers of 1024
// (2.1 M parameters, 8.5 MB of gradients a step, most of it in two 4 MB weight gradients pushed
// while backward still computes the layers before them); `small` (2 hidden layers of 64, 7 K
// parameters) is what the tests train, where only correctness matters. --hidden sets any
// widths. Every worker runs the single-process reference at the end, after its last operation
// on the cluster. With one epoch (--epochs 1) the loss has nothing to fall from: that check is
// skipped, and says so.
//
// Rank 0 prints one line per epoch, measured on rank 0:
//   samples/s       global samples of the epoch (every worker's) / the epoch's wall time
//   push_pull MB/s  comm.stats() at the epoch's end: the bytes this process push_pulled in the
//                   last 10 s (counted once, as nccl-tests' algbw does) / the time at least one
//                   of its transfers was in flight then: the speed of the exchange itself,
//                   whatever the trainer did in between (with several local ranks, this
//                   process's share of the bytes, over its own transfers)
//   hidden          1 - (time the trainer was blocked waiting for push_pull results after its
//                   backward pass had finished) / (the step's communication span: from its
//                   first push_pull call to its last one done), both summed over the epoch's
//                   steps: the share of the exchange that overlapped the backward pass
//
// With --compressor RECIPE (e.g. ef_onebit:scaling=1) the gradients are compressed (the servers
// decode, sum and re-encode; see docs/architecture.md "Encode and decode"), so the parameters no
// longer match the single-process run: the third check becomes "the final loss ends at most
// `loss_tolerance` above the uncompressed single-process run's final loss".
//
//   byteps-launch --workers 2 --servers 2 -- train_mlp [--model large|small] [--epochs N] ...
//   byteps-launch --workers 2 --local-size 2 -- train_mlp   (2 processes per machine)
//   BYTEPS_ENABLE_ASYNC=1 byteps-launch --workers 2 -- train_mlp --async   (train_mlp_async.hpp)
//   BYTEPS_MIN_NUM_WORKER=2 byteps-launch --workers 3 -- train_mlp --die-at-step 40
//                                                         (elastic training, train_mlp_elastic.hpp)

#include <byteps/byteps.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlp.hpp"
#include "train_mlp_args.hpp"
#include "train_mlp_checks.hpp"
#include "train_mlp_async.hpp"
#include "train_mlp_elastic.hpp"

// One process per machine (the defaults), or several meeting in shared memory
// (BYTEPS_LOCAL_SIZE > 1). The default transport sends pushes to a server on this machine
// through shared memory and to the others over TCP (transport/standard.hpp).
using DirectComm = bps::Communicator<>;
using HostComm = bps::Communicator<bps::transport::standard, bps::local::host>;
using clock_type = std::chrono::steady_clock;

namespace {

using train_mlp::Args;
using train_mlp::bad_args;
using train_mlp::parse_args;
using train_mlp::tensor_name;
using train_mlp::usage;

bool bit_equal(const mlp::Layer& a, const mlp::Layer& b) {
  return std::memcmp(a.w.data(), b.w.data(), a.w.size() * sizeof(float)) == 0 &&
         std::memcmp(a.b.data(), b.b.data(), a.b.size() * sizeof(float)) == 0;
}

// Broadcasts every tensor of `p` from rank 0 (all started at once, then all awaited).
template <class Comm>
void broadcast_params(Comm& comm, mlp::Params& p) {
  std::vector<bps::handle> hs;
  for (int l = 0; l < static_cast<int>(p.size()); ++l) {
    hs.push_back(comm.broadcast(tensor_name("params", l, "weight"), std::span<float>(p[l].w), 0));
    hs.push_back(comm.broadcast(tensor_name("params", l, "bias"), std::span<float>(p[l].b), 0));
  }
  for (auto& h : hs) h.wait();
}

// When one push_pull was called, and when it was done.
using Interval = std::pair<clock_type::time_point, clock_type::time_point>;

// The push_pulls of one step: when each was called and when it was done. The done times are
// written by the handles' when_done callbacks, on the communicator's threads.
class StepTimes {
 public:
  explicit StepTimes(std::size_t ops)
      : done_(std::make_shared<std::vector<std::atomic<clock_type::rep>>>(ops)) {}

  /// Operation `h`, called at `called`: remembers when it was called and when it is done.
  void track(const bps::handle& h, clock_type::time_point called) {
    const std::size_t k = called_.size();
    if (k == done_->size()) throw std::logic_error("StepTimes: more operations than declared");
    called_.push_back(called);
    h.when_done(
        [done = done_, k] { (*done)[k].store(clock_type::now().time_since_epoch().count()); });
  }

  /// After every operation was waited for, until `waited`: the [called, done] interval of each.
  /// wait() may return just before the finishing thread has run the callback; then the
  /// operation was done by `waited` at the latest.
  std::vector<Interval> intervals(clock_type::time_point waited) const {
    std::vector<Interval> v;
    for (std::size_t k = 0; k < called_.size(); ++k) {
      const clock_type::rep d = (*done_)[k].load();
      v.emplace_back(called_[k], d != 0 ? clock_type::time_point(clock_type::duration(d)) : waited);
    }
    return v;
  }

 private:
  std::vector<clock_type::time_point> called_;
  std::shared_ptr<std::vector<std::atomic<clock_type::rep>>> done_;  // 0 until done
};

// The communication span of a step: from the first push_pull call to the last one done.
double span_seconds(const std::vector<Interval>& ops) {
  if (ops.empty()) return 0;
  clock_type::time_point first = ops[0].first, last = ops[0].second;
  for (const auto& [called, done] : ops)
    first = std::min(first, called), last = std::max(last, done);
  return std::chrono::duration<double>(last - first).count();
}

std::string join_widths(const std::vector<int>& sizes) {
  std::string s;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    if (k > 0) s += '-';
    s += std::to_string(sizes[k]);
  }
  return s;
}

// With --compressor: how far the final loss may end above the uncompressed run's (absolute, in
// nats of cross-entropy). Lossy compression changes every step, so only the outcome can be
// compared, and only one way: ending lower is no fault (nesterov_ adds momentum, which the plain
// SGD reference lacks, and ends far lower). On the small model (20 epochs, k = 0.01) the
// error-feedback compressors, the casts and dithering end within 0.05 of it; 0.1 leaves room
// for other shapes and seeds, while topk, randomk and unscaled onebit without error feedback
// miss it by far (docs/performance.md has every figure).
constexpr double loss_tolerance = 0.1;

// --compressor's recipe, made with the built-ins (a bad one is a usage error naming it).
std::shared_ptr<const bps::compress::spec> gradient_compressor(const Args& args) {
  if (args.compressor.empty()) return nullptr;
  try {
    return bps::compress::by_name(bps::compress::parse(args.compressor, "--compressor"));
  } catch (const bps::usage_error& e) {
    throw bad_args(e.what());
  }
}

template <class Comm>
int run(const bps::Config& cfg, const Args& args) {
  const mlp::Hyper& hp = args.hyper;
  const mlp::Dataset data = mlp::make_dataset(hp.seed, args.samples);
  const auto codec = gradient_compressor(args);
  Comm comm(cfg);
  // Error feedback scales its kept error by the previous over the current learning rate: this
  // job's rate is constant, so once is enough (a schedule would call it at every change).
  comm.set_learning_rate(hp.lr);
  const int rank = comm.rank(), n = comm.size();  // every worker process, on every machine
  train_mlp::check_batch(hp, data, n);
  const int steps = mlp::steps_per_epoch(data.size(), n, hp.batch);
  const std::vector<int> sizes = mlp::layer_sizes(data, hp.hidden);
  mlp::Params params = mlp::init_params(hp.seed, sizes);
  double parameters = 0;
  for (const auto& L : params) parameters += static_cast<double>(L.w.size() + L.b.size());
  const double step_bytes = parameters * sizeof(float);  // gradient bytes push_pulled per step
  if (rank == 0)
    std::printf(
        "training a %s MLP (%.0f parameters, %.1f MB of gradients per step) on %d "
        "workers (%d machines): %d samples, global batch %d, %d steps/epoch, lr %g\n",
        join_widths(sizes).c_str(), parameters, step_bytes / 1e6, n, comm.machines(), data.size(),
        hp.batch, steps, hp.lr);
  if (rank == 0 && codec) {
    // Say how much is compressed: a small model's tensors may all be under the threshold.
    int compressed = 0, tensors = 0;
    for (const auto& layer : params)
      for (std::size_t count : {layer.w.size(), layer.b.size()}) {
        ++tensors;
        if (count * sizeof(float) >= cfg.min_compress_bytes) ++compressed;
      }
    std::printf("gradients compressed with %s: %d of %d tensors, those of at least %zu bytes "
                "(BYTEPS_MIN_COMPRESS_BYTES)%s\n",
                codec->name().c_str(), compressed, tensors, cfg.min_compress_bytes,
                compressed == 0 ? "; none is that large, so nothing is compressed" : "");
  }

  broadcast_params(comm, params);  // all start from the same seed anyway; shows the API
  mlp::Params grad = mlp::zeros_like(params);
  const int layers = static_cast<int>(params.size());
  std::vector<double> epoch_loss;

  for (int epoch = 1; epoch <= hp.epochs; ++epoch) {
    const clock_type::time_point epoch_start = clock_type::now();
    double loss_sum = 0, span = 0, blocked = 0;
    for (int step = 0; step < steps; ++step) {
      const std::vector<int> idx = mlp::worker_batch(data.size(), n, hp.batch, rank, step);
      std::vector<bps::handle> pending;
      StepTimes times(2 * static_cast<std::size_t>(layers));
      // Backward hands over each layer, last first, as soon as its gradient is final.
      loss_sum += mlp::loss_and_grad(params, data, idx, grad, [&](int l) {
        const bps::push_pull_options opt{
            .priority = layers - l, .average = true, .compressor = codec};
        clock_type::time_point called = clock_type::now();
        pending.push_back(
            comm.push_pull(tensor_name("grad", l, "weight"), std::span<float>(grad[l].w), opt));
        times.track(pending.back(), called);
        called = clock_type::now();
        pending.push_back(
            comm.push_pull(tensor_name("grad", l, "bias"), std::span<float>(grad[l].b), opt));
        times.track(pending.back(), called);
      });
      const clock_type::time_point backward_end = clock_type::now();
      for (auto& h : pending) h.wait();
      const clock_type::time_point waited = clock_type::now();
      const auto ops = times.intervals(waited);
      blocked += std::chrono::duration<double>(waited - backward_end).count();
      span += span_seconds(ops);
      mlp::sgd(params, grad, hp.lr);
    }
    std::vector<float> loss{static_cast<float>(loss_sum / steps)};
    const bps::push_pull_options mean{
        .priority = 0, .average = true, .compressor = bps::compress::none()};
    comm.push_pull("loss", std::span<float>(loss), mean).wait();
    epoch_loss.push_back(loss[0]);
    const double seconds = std::chrono::duration<double>(clock_type::now() - epoch_start).count();
    if (rank == 0)
      std::printf(
          "epoch %d/%d loss %.4f | %.0f samples/s | push_pull %.0f MB/s over in-flight "
          "time | %.0f%% of communication hidden behind backward\n",
          epoch, hp.epochs, loss[0], double(steps) * hp.batch / seconds,
          comm.stats().bytes_per_second() / 1e6,
          span > 0 ? 100.0 * std::max(0.0, 1.0 - blocked / span) : 0.0);
    std::fflush(stdout);
  }

  // (a) the loss fell, (b) every worker holds rank 0's parameters bit for bit, (c) they match
  // the same training run in a single process. Every worker runs that reference itself, after
  // its last operation on the cluster: it takes as long as the whole training run's arithmetic
  // on one core (minutes for a long run of the large model), and a worker waiting for rank 0
  // to send the result would wait in a broadcast, whose deadline (BYTEPS_OP_TIMEOUT_MS) it
  // could outlast. Outside the cluster no wait depends on how long it takes. The price: one
  // reference run per worker process instead of one for the job.
  mlp::Params root = params;
  broadcast_params(comm, root);
  bool same = true;
  for (int l = 0; l < layers; ++l) same = same && bit_equal(root[l], params[l]);
  comm.barrier();  // every worker is done with the cluster before any of them leaves

  const clock_type::time_point start = clock_type::now();
  const mlp::Trained reference = mlp::train_reference(data, hp, n);
  const double rel = mlp::max_rel_diff(params, reference.params);
  const double reference_loss = reference.epoch_loss.back();
  if (rank == 0) {
    std::printf("single-process reference run: %d steps in %.1f s\n", steps * hp.epochs,
                std::chrono::duration<double>(clock_type::now() - start).count());
    std::printf("final parameters: digest %016llx\n",
                static_cast<unsigned long long>(mlp::digest(params)));
  }
  train_mlp::checks result;
  char buf[160];
  result.loss_fell(epoch_loss);
  result.report(same, same ? "parameters equal rank 0's bit for bit"
                    : "parameters differ from rank 0's: the workers diverged");
  if (codec) {
    const double above = epoch_loss.back() - reference_loss;
    std::snprintf(buf, sizeof buf,
                  "final loss %.4f with %s is %+.4f from the uncompressed run's %.4f (at most "
                  "+%.2f)",
                  epoch_loss.back(), codec->name().c_str(), above, reference_loss,
                  loss_tolerance);
    result.report(above <= loss_tolerance, buf);
  } else {
    std::snprintf(buf, sizeof buf,
                  "max relative difference to the single-process reference %.3g (limit 1e-05)",
                  rel);
    result.report(rel <= 1e-5, buf);
  }
  return result.finish(comm);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    const bps::Config cfg = bps::Config::from_env();
    if (args.async != cfg.enable_async)  // every node must know the mode: it is the servers'
      throw bad_args(args.async ? "--async needs BYTEPS_ENABLE_ASYNC=1 in every node's "
                                  "environment (byteps-launch passes its own on)"
                                : "BYTEPS_ENABLE_ASYNC=1 is set: train with --async");
    if (args.async && !args.compressor.empty())
      throw bad_args("--compressor and --async: async servers add pushes as they come and do not "
                     "decode compressed ones; choose one");
    if (args.die_at_step >= 0 && !cfg.elastic())
      throw bad_args("--die-at-step needs elastic training: set BYTEPS_MIN_NUM_WORKER (or "
                     "BYTEPS_MAX_NUM_WORKER) in every node's environment");
    if (cfg.elastic() && (args.async || !args.compressor.empty()))
      throw bad_args("train_mlp under elastic training (BYTEPS_MIN_NUM_WORKER or "
                     "BYTEPS_MAX_NUM_WORKER set) trains synchronously and uncompressed: drop "
                     "--async and --compressor");
    const bool host =
        args.local_stage == "host" || (args.local_stage == "auto" && cfg.local_size > 1);
    if (cfg.elastic())
      return host ? train_mlp::run_elastic<HostComm>(cfg, args)
                  : train_mlp::run_elastic<DirectComm>(cfg, args);
    if (args.async)
      return host ? train_mlp::run_async<HostComm>(cfg, args)
                  : train_mlp::run_async<DirectComm>(cfg, args);
    return host ? run<HostComm>(cfg, args) : run<DirectComm>(cfg, args);
  } catch (const bad_args& e) {
    std::fprintf(stderr, "train_mlp: %s\n%s", e.what(), usage);
    return 2;
  } catch (const bps::error& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: unexpected error: %s\n", e.what());
    return 1;
  }
}
