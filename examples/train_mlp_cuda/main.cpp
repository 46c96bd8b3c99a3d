// The main job's small model (examples/mlp.hpp, as train_mlp --model small) trained on the GPU:
// parameters, activations and gradients live in device memory, the kernels run on the trainer's
// stream, and each layer's gradient is push_pulled through bps::local::nccl as soon as backward
// has computed it. The SGD kernels wait for the summed gradients on the stream
// (handle::device_event), not on the host. At the end it checks, as train_mlp does, that the
// loss fell, that all workers hold the same parameters bit for bit, and that they match the
// single-process reference run on the host.
//
//   byteps-launch --workers 2 --servers 2 -- train_mlp_cuda [--epochs 20] [--batch 256]
//   byteps-launch --workers 2 --local-size 2 -- train_mlp_cuda   (2 GPUs per machine)
//
// Exits 77 with a message when there is no CUDA device.

#include <byteps/bodies.hpp>
#include <byteps/local/nccl.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../mlp.hpp"
#include "kernels.hpp"

using Comm = bps::Communicator<bps::transport::tcp, bps::local::nccl, bps::partition::by_bytes,
                               bps::schedule::priority>;

namespace {

constexpr const char* usage =
    "Usage: train_mlp_cuda [--epochs N] [--batch B] [--lr LR] [--seed S] [--help]\n"
    "  --epochs N  epochs to train (default 20)\n"
    "  --batch B   global batch size, split evenly over the workers (default 256)\n"
    "  --lr LR     SGD learning rate (default 0.1)\n"
    "  --seed S    seed of the data set and of the initial parameters (default 1)\n"
    "Run it as every worker of a cluster on a machine with a GPU, e.g.\n"
    "  byteps-launch --workers 2 -- train_mlp_cuda\n";

// The GPU's tanhf, exp and log may differ from the host's by an ulp or so, and training
// amplifies such differences a little; the host-only train_mlp allows 1e-5.
constexpr double reference_limit = 1e-3;

struct bad_args : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct cuda_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw cuda_failure(std::string(call) + " failed: " + cudaGetErrorName(e) + ": " +
                       cudaGetErrorString(e));
}

mlp::Hyper parse_args(int argc, char** argv) {
  mlp::Hyper h;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw bad_args("unknown option or missing value: " + arg);
    const char* v = argv[++i];
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
  return h;
}

// Device memory for `count` elements of T, freed with the object.
template <class T>
class device_array {
 public:
  explicit device_array(std::size_t count) : count_(count) {
    void* p = nullptr;
    cuda(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)), "cudaMalloc");
    p_ = static_cast<T*>(p);
  }
  device_array(std::span<const T> host) : device_array(host.size()) { upload(host); }
  device_array(device_array&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() {
    if (p_ != nullptr) cudaFree(p_);
  }
  T* get() const { return p_; }
  std::size_t size() const { return count_; }
  std::span<T> span() const { return {p_, count_}; }
  void upload(std::span<const T> host) {
    cuda(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
         "cudaMemcpy to the device");
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    cuda(cudaMemcpy(host.data(), p_, count_ * sizeof(T), cudaMemcpyDeviceToHost),
         "cudaMemcpy to the host");
    return host;
  }

 private:
  T* p_ = nullptr;
  std::size_t count_ = 0;
};

struct device_layer {
  int in = 0, out = 0;
  device_array<float> w, b;
};

std::vector<device_layer> upload(const mlp::Params& p) {
  std::vector<device_layer> d;
  for (const mlp::Layer& L : p)
    d.push_back({L.in, L.out, device_array<float>(std::span<const float>(L.w)),
                 device_array<float>(std::span<const float>(L.b))});
  return d;
}

mlp::Params download(const std::vector<device_layer>& d) {
  mlp::Params p;
  for (const device_layer& L : d) p.push_back({L.in, L.out, L.w.download(), L.b.download()});
  return p;
}

std::string tensor_name(const char* prefix, int layer, const char* what) {
  return std::string(prefix) + ".layer" + std::to_string(layer) + "." + what;
}

// Broadcasts every tensor from rank 0. A broadcast orders itself after the legacy default
// stream only, so the caller's device work must be finished (it is: see the callers).
void broadcast_params(Comm& comm, std::vector<device_layer>& p) {
  std::vector<bps::handle> hs;
  for (int l = 0; l < static_cast<int>(p.size()); ++l) {
    hs.push_back(comm.broadcast(tensor_name("params", l, "weight"), p[l].w.span(), 0));
    hs.push_back(comm.broadcast(tensor_name("params", l, "bias"), p[l].b.span(), 0));
  }
  for (auto& h : hs) h.wait();
}

bool bit_equal(const mlp::Layer& a, const mlp::Layer& b) {
  return std::memcmp(a.w.data(), b.w.data(), a.w.size() * sizeof(float)) == 0 &&
         std::memcmp(a.b.data(), b.b.data(), a.b.size() * sizeof(float)) == 0;
}

int run(const mlp::Hyper& hp) {
  const bps::Config cfg = bps::Config::from_env();
  const mlp::Dataset data = mlp::make_dataset(hp.seed);
  Comm comm(cfg);
  const int rank = comm.rank(), n = comm.size();
  if (hp.batch % n != 0 || hp.batch / n > data.size() / n)
    throw bad_args("--batch " + std::to_string(hp.batch) + " must be a multiple of the " +
                   std::to_string(n) + " worker processes and at most " +
                   std::to_string(data.size() / n * n));
  int devices = 0;
  cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  cuda(cudaSetDevice(devices == 1 ? 0 : comm.local_rank()), "cudaSetDevice");  // as nccl picks
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");

  const int steps = mlp::steps_per_epoch(data.size(), n, hp.batch);
  const int local = hp.batch / n;  // this worker's samples per step
  if (rank == 0)
    std::printf("training on %d GPU workers (%d machines): %d samples, global batch %d, %d "
                "steps/epoch, lr %g\n",
                n, comm.machines(), data.size(), hp.batch, steps, hp.lr);

  const device_array<float> x(std::span<const float>(data.x));
  const device_array<int> y(std::span<const int>(data.y));
  std::vector<device_layer> params = upload(mlp::init_params(hp.seed));
  std::vector<device_layer> grad = upload(mlp::zeros_like(mlp::init_params(hp.seed)));
  const int layers = static_cast<int>(params.size());
  std::vector<device_array<float>> acts;  // acts[l+1]: output of layer l, local x width
  std::vector<device_array<float>> deltas;  // deltas[l]: dLoss/d(output of layer l)
  for (const auto& L : params) {
    acts.emplace_back(static_cast<std::size_t>(local) * L.out);
    deltas.emplace_back(static_cast<std::size_t>(local) * L.out);
  }
  device_array<double> sample_loss(static_cast<std::size_t>(local));
  device_array<float> loss_dev(1);
  std::vector<double> loss_host(static_cast<std::size_t>(local));
  broadcast_params(comm, params);  // all start from the same seed anyway; shows the API

  std::vector<double> epoch_loss;
  for (int epoch = 1; epoch <= hp.epochs; ++epoch) {
    double loss_sum = 0;
    for (int step = 0; step < steps; ++step) {
      // This worker's batch is a contiguous run of samples: its rows of x and y.
      const int begin = static_cast<int>(std::int64_t(rank) * data.size() / n) + step * local;
      const float* input = x.get() + static_cast<std::size_t>(begin) * data.features;
      for (int l = 0; l < layers; ++l)
        mlp_cuda::forward_layer(l == 0 ? input : acts[l - 1].get(), params[l].w.get(),
                                params[l].b.get(), acts[l].get(), local, params[l].in,
                                params[l].out, l + 1 < layers, stream);
      mlp_cuda::softmax_xent(acts[layers - 1].get(), y.get() + begin, deltas[layers - 1].get(),
                             sample_loss.get(), local, params[layers - 1].out, stream);
      cuda(cudaMemcpyAsync(loss_host.data(), sample_loss.get(), loss_host.size() * sizeof(double),
                           cudaMemcpyDeviceToHost, stream),
           "cudaMemcpyAsync of the losses");
      // Backward, last layer first; each gradient goes out as soon as its kernel is queued
      // (push_pull starts after the work queued on `stream` before it).
      std::vector<bps::handle> pending;
      for (int l = layers - 1; l >= 0; --l) {
        const float* a = l == 0 ? input : acts[l - 1].get();
        mlp_cuda::layer_gradient(deltas[l].get(), a, grad[l].w.get(), grad[l].b.get(), local,
                                 params[l].in, params[l].out, stream);
        const bps::push_pull_options opt{.priority = layers - l, .average = true, .stream = stream};
        pending.push_back(comm.push_pull(tensor_name("grad", l, "weight"), grad[l].w.span(), opt));
        pending.push_back(comm.push_pull(tensor_name("grad", l, "bias"), grad[l].b.span(), opt));
        if (l > 0)
          mlp_cuda::backprop(params[l].w.get(), deltas[l].get(), a, deltas[l - 1].get(), local,
                             params[l].in, params[l].out, stream);
      }
      // SGD waits for the summed gradients on the stream; the host only for the network.
      for (auto& h : pending)
        cuda(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(h.device_event()), 0),
             "cudaStreamWaitEvent");
      for (int l = 0; l < layers; ++l) {
        mlp_cuda::sgd(params[l].w.get(), grad[l].w.get(), hp.lr,
                      static_cast<int>(params[l].w.size()), stream);
        mlp_cuda::sgd(params[l].b.get(), grad[l].b.get(), hp.lr,
                      static_cast<int>(params[l].b.size()), stream);
      }
      for (auto& h : pending) h.wait();  // a tensor takes one operation at a time
      cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      double batch_loss = 0;
      for (double v : loss_host) batch_loss += v;
      loss_sum += batch_loss / local;
    }
    const float mean_loss = static_cast<float>(loss_sum / steps);
    cuda(cudaMemcpy(loss_dev.get(), &mean_loss, sizeof(float), cudaMemcpyHostToDevice),
         "cudaMemcpy of the loss");
    comm.push_pull("loss", loss_dev.span(), {.priority = 0, .average = true}).wait();
    epoch_loss.push_back(loss_dev.download()[0]);
    if (rank == 0) std::printf("epoch %d/%d loss %.4f\n", epoch, hp.epochs, epoch_loss.back());
    std::fflush(stdout);
  }

  // (a) the loss fell, (b) every worker holds rank 0's parameters bit for bit, (c) they match
  // the same training run in a single process on the host.
  cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const mlp::Params mine = download(params);
  std::vector<device_layer> root = upload(mine);
  broadcast_params(comm, root);
  const mlp::Params roots = download(root);
  bool same = true;
  for (int l = 0; l < layers; ++l) same = same && bit_equal(roots[l], mine[l]);
  const mlp::Trained ref = mlp::train_reference(data, hp, n);
  const double rel = mlp::max_rel_diff(mine, ref.params);
  comm.barrier();  // every worker is done with the cluster before any of them leaves
  cudaStreamDestroy(stream);

  int failures = 0;
  auto report = [&](bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "OK" : "FAILED:", what.c_str());
    failures += ok ? 0 : 1;
  };
  char buf[160];
  const bool fell = epoch_loss.back() < epoch_loss.front();
  std::snprintf(buf, sizeof buf, "loss fell from %.4f (epoch 1) to %.4f (epoch %d)",
                epoch_loss.front(), epoch_loss.back(), hp.epochs);
  report(fell, buf);
  report(same, same ? "parameters equal rank 0's bit for bit"
                    : "parameters differ from rank 0's: the workers diverged");
  std::snprintf(buf, sizeof buf,
                "max relative difference to the single-process host reference %.3g (limit %g)",
                rel, reference_limit);
  report(rel <= reference_limit, buf);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const mlp::Hyper hp = parse_args(argc, argv);
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
      std::printf("train_mlp_cuda: SKIPPED: no CUDA device (cudaGetDeviceCount: %s); this "
                  "example needs a GPU (train_mlp is the same job on the CPU)\n",
                  e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
      return 77;
    }
    return run(hp);
  } catch (const bad_args& e) {
    std::fprintf(stderr, "train_mlp_cuda: %s\n%s", e.what(), usage);
    return 2;
  } catch (const bps::error& e) {
    std::fprintf(stderr, "train_mlp_cuda: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp_cuda: %s\n", e.what());
    return 1;
  }
}
