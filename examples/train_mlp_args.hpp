#pragma once
// train_mlp's command line: the options, their ranges and the models they pick. Every mistake
// is a bad_args that names the option and what it expects.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlp.hpp"

namespace train_mlp {

constexpr const char* usage =
    "Usage: train_mlp [--model large|small] [--hidden W,W,...] [--samples N] [--epochs N]\n"
    "                 [--batch B] [--lr LR] [--seed S] [--local-stage auto|host|none] [--async]\n"
    "                 [--compressor RECIPE] [--die-at-step K] [--help]\n"
    "  --model M       large (default): hidden layers 1024,1024,1024 (2.1 M parameters),\n"
    "                  2048 samples, 6 epochs; small: hidden layers 64,64 (7 K parameters),\n"
    "                  4096 samples, 20 epochs (what the tests train). The options below\n"
    "                  override the model's values.\n"
    "  --hidden W,...  widths of the hidden layers, 1 to 8 of them, each 1 to 8192, at most\n"
    "                  64 M parameters in all\n"
    "  --samples N     samples in the synthetic data set, 1 to 1048576 (32 features, 4 classes)\n"
    "  --epochs N      epochs to train, 1 to 1000000\n"
    "  --batch B       global batch size, split evenly over the workers (default 256)\n"
    "  --lr LR         SGD learning rate, above 0 and below 100 (default 0.1)\n"
    "  --seed S        seed of the data set and of the initial parameters, 0 to 4294967295\n"
    "                  (default 1)\n"
    "  --local-stage S how the processes of one machine combine before the servers: host\n"
    "                  (shared memory), none (each talks to the servers), auto: host when\n"
    "                  BYTEPS_LOCAL_SIZE > 1 (default auto). Every machine of a job where some\n"
    "                  machine runs several processes needs host.\n"
    "  --async         asynchronous training (needs BYTEPS_ENABLE_ASYNC=1 on every node): each\n"
    "                  step pushes its update, -lr/N x its gradient, and gets the servers'\n"
    "                  current parameters back without waiting for the other workers\n"
    "  --compressor R  compress the gradients with recipe R, e.g. fp16, ef_onebit:scaling=1,\n"
    "                  topk:k=0.01 (the syntax of BYTEPS_COMPRESSOR, docs/env.md); tensors under\n"
    "                  BYTEPS_MIN_COMPRESS_BYTES (default 65536) stay raw. The end check then\n"
    "                  compares the final loss with the uncompressed run's instead of the\n"
    "                  parameters\n"
    "  --die-at-step K elastic training only (BYTEPS_MIN_NUM_WORKER or BYTEPS_MAX_NUM_WORKER\n"
    "                  set): the worker of the highest rank ends itself with SIGKILL at the\n"
    "                  start of global step K (from 0, over all epochs); the others go on, and\n"
    "                  the end check replays the run without it from step K\n"
    "Under elastic training a train_mlp started while the job runs (the same options, and\n"
    "DMLC_WORKER_ID unset or a machine not in the job) joins it between steps, while fewer\n"
    "than BYTEPS_MAX_NUM_WORKER machines take part: it is given the parameters and the step,\n"
    "and every worker splits the batch anew from that step on.\n"
    "Rank 0 prints per epoch: the mean loss, samples/s (global samples per second of wall\n"
    "time), push_pull MB/s (comm.stats(): bytes push_pulled in the last 10 s over the time\n"
    "transfers were in flight) and the share of communication hidden behind backward.\n"
    "Run it as every worker of a cluster, e.g. byteps-launch --workers 2 -- train_mlp\n";

/// The job's tensors: "<prefix>.layer<l>.<what>", e.g. grad.layer0.weight.
inline std::string tensor_name(const char* prefix, int layer, const char* what) {
  return std::string(prefix) + ".layer" + std::to_string(layer) + "." + what;
}

struct bad_args : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  mlp::Hyper hyper;
  int samples = 4096;
  std::string local_stage = "auto";
  bool async = false;  ///< --async (train_mlp_async.hpp)
  std::string compressor;  ///< --compressor: a recipe's text; empty for none
  int die_at_step = -1;    ///< --die-at-step (train_mlp_elastic.hpp); -1: nobody dies
};

// A whole number in [lo, hi], or bad_args naming the option and what it expects.
inline long long whole_number(const std::string& option, const std::string& v, long long lo,
                       long long hi) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size() || v[0] == ' ' || x < lo || x > hi)
    throw bad_args(option + " '" + v + "': expected a whole number from " + std::to_string(lo) +
                   " to " + std::to_string(hi));
  return x;
}

/// The global batch splits evenly over `workers` processes and fits in the data set: checked by
/// every worker alike, so that all of them fail together.
inline void check_batch(const mlp::Hyper& h, const mlp::Dataset& data, int workers) {
  if (h.batch % workers != 0 || h.batch / workers > data.size() / workers)
    throw bad_args("--batch " + std::to_string(h.batch) + " must be a multiple of the " +
                   std::to_string(workers) + " worker processes and at most " +
                   std::to_string(data.size() / workers * workers) + " (the data set has " +
                   std::to_string(data.size()) + " samples, --samples)");
}

inline Args parse_args(int argc, char** argv) {
  // Every option is read first, then applied over the model's values, so order does not matter.
  std::string model = "large";
  std::optional<std::vector<int>> hidden;
  std::optional<int> samples, epochs, batch;
  std::optional<float> lr;
  std::optional<std::uint32_t> seed;
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    if (arg == "--async") {  // the one option without a value
      a.async = true;
      continue;
    }
    static const char* const known[] = {"--model", "--hidden", "--samples", "--epochs",
                                        "--batch", "--lr",     "--seed",    "--local-stage",
                                        "--compressor", "--die-at-step"};
    if (std::find(std::begin(known), std::end(known), arg) == std::end(known))
      throw bad_args("unknown option '" + arg + "'");
    if (i + 1 >= argc) throw bad_args(arg + " needs a value");
    const std::string v = argv[++i];
    if (arg == "--model") {
      if (v != "large" && v != "small")
        throw bad_args("--model '" + v + "': expected large or small");
      model = v;
    } else if (arg == "--hidden") {
      std::vector<int> widths;
      std::size_t begin = 0;
      while (true) {
        const std::size_t comma = v.find(',', begin);
        const std::string item =
            v.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
        try {
          widths.push_back(static_cast<int>(whole_number("--hidden", item, 1, 8192)));
        } catch (const bad_args&) {
          throw bad_args("--hidden '" + v +
                         "': expected 1 to 8 widths separated by commas, each a whole number from "
                         "1 to 8192, e.g. 1024,1024");
        }
        if (comma == std::string::npos) break;
        begin = comma + 1;
      }
      if (widths.size() > 8)
        throw bad_args("--hidden '" + v + "': at most 8 hidden layers, got " +
                       std::to_string(widths.size()));
      hidden = widths;
    } else if (arg == "--samples") {
      samples = static_cast<int>(whole_number(arg, v, 1, 1 << 20));
    } else if (arg == "--epochs") {
      epochs = static_cast<int>(whole_number(arg, v, 1, 1000000));
    } else if (arg == "--batch") {
      batch = static_cast<int>(whole_number(arg, v, 1, 1 << 20));
    } else if (arg == "--seed") {
      seed = static_cast<std::uint32_t>(whole_number(arg, v, 0, 4294967295LL));
    } else if (arg == "--lr") {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x > 0 && x < 100))
        throw bad_args("--lr '" + v + "': expected a number above 0 and below 100");
      lr = static_cast<float>(x);
    } else if (arg == "--die-at-step") {
      a.die_at_step = static_cast<int>(whole_number(arg, v, 0, 1 << 30));
    } else if (arg == "--compressor") {
      a.compressor = v;  // checked by train_mlp.cpp, which has the registry
    } else {  // --local-stage
      if (v != "auto" && v != "host" && v != "none")
        throw bad_args("--local-stage '" + v + "': expected auto, host or none");
      a.local_stage = v;
    }
  }
  mlp::Hyper& h = a.hyper;  // batch 256, lr 0.1, seed 1 for both models
  if (model == "large") {
    h.hidden = {1024, 1024, 1024};
    h.epochs = 6;
    a.samples = 2048;
  } else {
    h.hidden = {64, 64};
    h.epochs = 20;
    a.samples = 4096;
  }
  if (hidden) h.hidden = *hidden;
  if (samples) a.samples = *samples;
  if (epochs) h.epochs = *epochs;
  if (batch) h.batch = *batch;
  if (lr) h.lr = *lr;
  if (seed) h.seed = *seed;
  // The data set has 32 features and 4 classes (mlp::make_dataset's defaults).
  double parameters = 0;
  for (std::size_t l = 0; l <= h.hidden.size(); ++l) {
    const double in = l == 0 ? 32 : h.hidden[l - 1], out = l == h.hidden.size() ? 4 : h.hidden[l];
    parameters += in * out + out;
  }
  if (parameters > 64e6)
    throw bad_args("--hidden: the model would have " +
                   std::to_string(static_cast<long long>(parameters)) +
                   " parameters; at most 64000000");
  return a;
}

}  // namespace train_mlp
