#pragma once
// train_torch's command line.

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace train_torch {

inline constexpr const char* usage = R"(usage: byteps-launch --workers N --servers K -- train_torch [options]
Trains a libtorch model data-parallel through byteps (bps::torch::DistributedOptimizer) on a
seeded synthetic data set, then checks that every worker holds the same parameters bit for bit.
  --model cnn|transformer  a small ResNet on 3x32x32 images (default), or a transformer
                           language model (29.4 M parameters with the default shape)
  --epochs N               epochs (default 3); an epoch is --steps steps over the same data
  --steps N                steps per epoch (default 8)
  --batch N                global batch: samples (sequences) per step over all workers
                           (default 64 for cnn, 8 for transformer); a multiple of the workers
                           times --backward-passes
  --lr X                   SGD learning rate (default 0.05 cnn, 0.1 transformer), momentum 0.9
  --seed N                 data and initialisation seed (default 1)
  --backward-passes K      gradient accumulation: K backward passes of a K-th of the local
                           batch each (loss scaled by 1/K), one exchange per step (default 1)
  --context T              transformer: tokens per sequence (default 64)
  --layers N --width D --vocab V   transformer shape (default 4, 512, 16384)
  --threads N              libtorch's intra-op threads per worker (default 1)
  --diverge-ranks          worker r initialises with seed + r and learning rate x (1 + r):
                           broadcast_parameters and broadcast_optimizer_state must make them
                           rank 0's, or the bit-for-bit check fails
  --reference              rank 0 also trains the same steps in one process over each global
                           batch and checks the final loss is within 1e-4 (relative) of the
                           distributed run's
  --help                   this text
Per epoch, rank 0 prints the mean loss over the epoch's steps and workers, the global
samples/s, and how much of the gradient exchange was hidden behind the backward pass.
)";

struct bad_args : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::string model = "cnn";
  int epochs = 3, steps = 8, batch = 0, seed = 1, backward_passes = 1, threads = 1;
  double lr = 0;
  int64_t context = 64, layers = 4, width = 512, vocab = 16384;
  bool diverge_ranks = false, reference = false, help = false;
};

inline Args parse_args(int argc, char** argv) {
  Args a;
  auto number = [&](int& i, const std::string& flag) -> double {
    if (i + 1 >= argc) throw bad_args(flag + " needs a value");
    char* end = nullptr;
    const double v = std::strtod(argv[++i], &end);
    if (end == argv[i] || *end != '\0') throw bad_args(flag + ": '" + argv[i] + "' is not a number");
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") a.help = true;
    else if (f == "--model") {
      if (i + 1 >= argc) throw bad_args("--model needs a value: cnn or transformer");
      a.model = argv[++i];
      if (a.model != "cnn" && a.model != "transformer")
        throw bad_args("--model '" + a.model + "': expected cnn or transformer");
    } else if (f == "--epochs") a.epochs = static_cast<int>(number(i, f));
    else if (f == "--steps") a.steps = static_cast<int>(number(i, f));
    else if (f == "--batch") a.batch = static_cast<int>(number(i, f));
    else if (f == "--lr") a.lr = number(i, f);
    else if (f == "--seed") a.seed = static_cast<int>(number(i, f));
    else if (f == "--backward-passes") a.backward_passes = static_cast<int>(number(i, f));
    else if (f == "--context") a.context = static_cast<int64_t>(number(i, f));
    else if (f == "--layers") a.layers = static_cast<int64_t>(number(i, f));
    else if (f == "--width") a.width = static_cast<int64_t>(number(i, f));
    else if (f == "--vocab") a.vocab = static_cast<int64_t>(number(i, f));
    else if (f == "--threads") a.threads = static_cast<int>(number(i, f));
    else if (f == "--diverge-ranks") a.diverge_ranks = true;
    else if (f == "--reference") a.reference = true;
    else throw bad_args("unknown option '" + f + "'");
  }
  const bool lm = a.model == "transformer";
  if (a.batch == 0) a.batch = lm ? 8 : 64;
  if (a.lr == 0) a.lr = lm ? 0.1 : 0.05;
  if (a.epochs < 1 || a.steps < 1 || a.batch < 1 || a.backward_passes < 1 || a.threads < 1 ||
      a.context < 1 || a.layers < 1 || a.width < 8 || a.vocab < 2)
    throw bad_args("--epochs, --steps, --batch, --backward-passes, --threads, --context, "
                   "--layers, --vocab must be positive and --width at least 8");
  if (!(a.lr > 0)) throw bad_args("--lr must be positive");
  return a;
}

}  // namespace train_torch
