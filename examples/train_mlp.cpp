// Data-parallel training of a small MLP through byteps (run it with tools/byteps-launch):
// every worker trains on its shard, push_pulls each layer's gradient as soon as backward has
// computed it (the first layer, needed first by the next forward pass, at the highest priority),
// and applies the averaged gradient. At the end it checks that the loss fell, that all workers
// hold the same parameters bit for bit, and that they match a single-process reference run.
//
//   byteps-launch --workers 2 --servers 2 -- train_mlp [--epochs 20] [--batch 256] [--lr 0.1]
//   byteps-launch --workers 2 --local-size 2 -- train_mlp   (2 processes per machine)

#include <byteps/byteps.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlp.hpp"

// One process per machine, or several meeting in shared memory (BYTEPS_LOCAL_SIZE > 1). The
// ipc transport sends pushes to a server on this machine through shared memory.
using DirectComm = bps::Communicator<bps::transport::ipc<bps::transport::tcp>, bps::local::none,
                                     bps::partition::by_bytes, bps::schedule::priority>;
using HostComm = bps::Communicator<bps::transport::ipc<bps::transport::tcp>, bps::local::host,
                                   bps::partition::by_bytes, bps::schedule::priority>;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* usage =
    "Usage: train_mlp [--epochs N] [--batch B] [--lr LR] [--seed S] [--local-stage S] [--help]\n"
    "  --epochs N  epochs to train (default 20)\n"
    "  --batch B   global batch size, split evenly over the workers (default 256)\n"
    "  --lr LR     SGD learning rate (default 0.1)\n"
    "  --seed S    seed of the data set and of the initial parameters (default 1)\n"
    "  --local-stage auto|host|none\n"
    "              how the processes of one machine combine before the servers: host (shared\n"
    "              memory), none (each talks to the servers), auto: host when\n"
    "              BYTEPS_LOCAL_SIZE > 1 (default auto). Every machine of a job where some\n"
    "              machine runs several processes needs host.\n"
    "Run it as every worker of a cluster, e.g. byteps-launch --workers 2 -- train_mlp\n";

struct bad_args : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  mlp::Hyper hyper;
  std::string local_stage = "auto";
};

Args parse_args(int argc, char** argv) {
  Args a;
  mlp::Hyper& h = a.hyper;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw bad_args("unknown option or missing value: " + arg);
    const char* v = argv[++i];
    if (arg == "--local-stage") {
      a.local_stage = v;
      if (a.local_stage != "auto" && a.local_stage != "host" && a.local_stage != "none")
        throw bad_args(arg + " " + v + ": expected auto, host or none");
      continue;
    }
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    const bool number = end != v && *end == '\0', whole = number && x == std::floor(x);
    if (arg == "--epochs" && whole && x >= 1 && x <= 1e6) {
      h.epochs = static_cast<int>(x);
    } else if (arg == "--batch" && whole && x >= 1 && x <= 1 << 20) {
      h.batch = static_cast<int>(x);
    } else if (arg == "--lr" && number && x > 0 && x < 100) {
      h.lr = static_cast<float>(x);
    } else if (arg == "--seed" && whole && x >= 0 && x <= 4294967295.0) {
      h.seed = static_cast<std::uint32_t>(x);
    } else {
      throw bad_args(arg + " " + v + ": unknown option or invalid value");
    }
  }
  return a;
}

std::string tensor_name(const char* prefix, int layer, const char* what) {
  return std::string(prefix) + ".layer" + std::to_string(layer) + "." + what;
}

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

template <class Comm>
int run(const bps::Config& cfg, const mlp::Hyper& hp) {
  const mlp::Dataset data = mlp::make_dataset(hp.seed);
  Comm comm(cfg);
  const int rank = comm.rank(), n = comm.size();  // every worker process, on every machine
  // Every worker checks the same thing, so all of them fail together.
  if (hp.batch % n != 0 || hp.batch / n > data.size() / n)
    throw bad_args("--batch " + std::to_string(hp.batch) + " must be a multiple of the " +
                   std::to_string(n) + " worker processes and at most " +
                   std::to_string(data.size() / n * n) + " (the data set has " +
                   std::to_string(data.size()) + " samples)");
  const int steps = mlp::steps_per_epoch(data.size(), n, hp.batch);
  if (rank == 0)
    std::printf("training on %d workers (%d machines): %d samples, global batch %d, %d "
                "steps/epoch, lr %g\n",
                n, comm.machines(), data.size(), hp.batch, steps, hp.lr);

  mlp::Params params = mlp::init_params(hp.seed);
  broadcast_params(comm, params);  // all start from the same seed anyway; shows the API
  mlp::Params grad = mlp::zeros_like(params);
  const int layers = static_cast<int>(params.size());
  std::vector<double> epoch_loss;

  for (int epoch = 1; epoch <= hp.epochs; ++epoch) {
    double loss_sum = 0, comm_seconds = 0, bytes = 0;
    for (int step = 0; step < steps; ++step) {
      const std::vector<int> idx = mlp::worker_batch(data.size(), n, hp.batch, rank, step);
      std::vector<bps::handle> pending;
      clock_type::time_point first_push;
      // Backward hands over each layer, last first, as soon as its gradient is final.
      loss_sum += mlp::loss_and_grad(params, data, idx, grad, [&](int l) {
        if (pending.empty()) first_push = clock_type::now();
        const bps::push_pull_options opt{.priority = layers - l, .average = true};
        pending.push_back(
            comm.push_pull(tensor_name("grad", l, "weight"), std::span<float>(grad[l].w), opt));
        pending.push_back(
            comm.push_pull(tensor_name("grad", l, "bias"), std::span<float>(grad[l].b), opt));
        bytes += static_cast<double>(grad[l].w.size() + grad[l].b.size()) * sizeof(float);
      });
      for (auto& h : pending) h.wait();
      comm_seconds += std::chrono::duration<double>(clock_type::now() - first_push).count();
      mlp::sgd(params, grad, hp.lr);
    }
    std::vector<float> loss{static_cast<float>(loss_sum / steps)};
    const bps::push_pull_options mean{.priority = 0, .average = true};
    comm.push_pull("loss", std::span<float>(loss), mean).wait();
    epoch_loss.push_back(loss[0]);
    if (rank == 0)
      std::printf("epoch %d/%d loss %.4f push_pull %.1f MB/s\n", epoch, hp.epochs, loss[0],
                  comm_seconds > 0 ? bytes / comm_seconds / 1e6 : 0.0);
    std::fflush(stdout);
  }

  // (a) the loss fell, (b) every worker holds rank 0's parameters bit for bit, (c) they match
  // the same training run in a single process.
  const bool fell = epoch_loss.back() < epoch_loss.front();
  mlp::Params root = params;
  broadcast_params(comm, root);
  bool same = true;
  for (int l = 0; l < layers; ++l) same = same && bit_equal(root[l], params[l]);
  const mlp::Trained ref = mlp::train_reference(data, hp, n);
  const double rel = mlp::max_rel_diff(params, ref.params);
  comm.barrier();  // every worker is done with the cluster before any of them leaves

  int failures = 0;
  auto report = [&](bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "OK" : "FAILED:", what.c_str());
    failures += ok ? 0 : 1;
  };
  char buf[160];
  std::snprintf(buf, sizeof buf, "loss fell from %.4f (epoch 1) to %.4f (epoch %d)",
                epoch_loss.front(), epoch_loss.back(), hp.epochs);
  report(fell, buf);
  report(same, same ? "parameters equal rank 0's bit for bit"
                    : "parameters differ from rank 0's: the workers diverged");
  std::snprintf(buf, sizeof buf,
                "max relative difference to the single-process reference %.3g (limit 1e-05)", rel);
  report(rel <= 1e-5, buf);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    const bps::Config cfg = bps::Config::from_env();
    const bool host = args.local_stage == "host" || (args.local_stage == "auto" && cfg.local_size > 1);
    return host ? run<HostComm>(cfg, args.hyper) : run<DirectComm>(cfg, args.hyper);
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
