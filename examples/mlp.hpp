#pragma once
/// @file
/// Everything of the train_mlp example that is not communication, in plain C++20: a synthetic
/// classification data set, a small MLP (tanh hidden layers, softmax cross-entropy), forward,
/// backward with a per-layer callback, SGD, and a single-process reference trainer.
///
/// Data-parallel semantics: global batch B, N workers. Worker w owns the contiguous shard
/// [w*S/N, (w+1)*S/N) of the S samples; at step t it takes the t-th run of B/N samples of its
/// shard and computes the mean gradient over them; the workers' gradients are averaged. The
/// reference uses, at each step, the union of those N mini-batches and the mean over all B.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

namespace mlp {

struct Dataset {
  int features = 0, classes = 0;
  std::vector<float> x;  ///< size() x features, row-major
  std::vector<int> y;    ///< labels in [0, classes)
  int size() const { return static_cast<int>(y.size()); }
};

/// Gaussian inputs labelled by a fixed random teacher network (argmax of W2 tanh(W1 x)).
inline Dataset make_dataset(std::uint32_t seed, int samples = 4096, int features = 32,
                            int classes = 4) {
  constexpr int teacher_hidden = 16;
  std::mt19937 teacher_rng(12345);  // the teacher never changes; the seed picks the inputs
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w1(teacher_hidden * features), w2(classes * teacher_hidden);
  for (auto& v : w1) v = normal(teacher_rng) / std::sqrt(static_cast<float>(features));
  for (auto& v : w2) v = normal(teacher_rng);
  Dataset d{features, classes, std::vector<float>(std::size_t(samples) * features), {}};
  std::mt19937 rng(seed);
  std::vector<float> h(teacher_hidden);
  for (int s = 0; s < samples; ++s) {
    float* x = &d.x[std::size_t(s) * features];
    for (int i = 0; i < features; ++i) x[i] = normal(rng);
    for (int j = 0; j < teacher_hidden; ++j) {
      float z = 0;
      for (int i = 0; i < features; ++i) z += w1[j * features + i] * x[i];
      h[j] = std::tanh(2.0f * z);
    }
    int best = 0;
    float best_logit = -1e30f;
    for (int c = 0; c < classes; ++c) {
      float z = 0;
      for (int j = 0; j < teacher_hidden; ++j) z += w2[c * teacher_hidden + j] * h[j];
      if (z > best_logit) best_logit = z, best = c;
    }
    d.y.push_back(best);
  }
  return d;
}

/// One dense layer: w is out x in (row-major), b has out entries. Gradients use the same type.
struct Layer {
  int in = 0, out = 0;
  std::vector<float> w, b;
};
using Params = std::vector<Layer>;

/// Xavier-uniform weights and zero biases, e.g. sizes {32, 64, 64, 4} gives three layers.
inline Params init_params(std::uint32_t seed, const std::vector<int>& sizes = {32, 64, 64, 4}) {
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  Params p;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
    Layer L{sizes[l], sizes[l + 1], std::vector<float>(std::size_t(sizes[l]) * sizes[l + 1]),
            std::vector<float>(sizes[l + 1], 0.0f)};
    float a = std::sqrt(6.0f / static_cast<float>(L.in + L.out));
    std::uniform_real_distribution<float> u(-a, a);
    for (auto& v : L.w) v = u(rng);
    p.push_back(std::move(L));
  }
  return p;
}

inline Params zeros_like(const Params& p) {
  Params g;
  for (const Layer& L : p)
    g.push_back({L.in, L.out, std::vector<float>(L.w.size()), std::vector<float>(L.b.size())});
  return g;
}

/// Activations of a batch: acts[0] is the input, acts[l+1] the output of layer l (tanh for
/// hidden layers, logits for the last one); each is batch x width, row-major.
struct Forward {
  std::vector<int> labels;
  std::vector<std::vector<float>> acts;
};

inline Forward forward(const Params& p, const Dataset& d, std::span<const int> idx) {
  const int n = static_cast<int>(idx.size());
  Forward f;
  f.acts.emplace_back(std::size_t(n) * d.features);
  for (int s = 0; s < n; ++s) {
    std::copy_n(&d.x[std::size_t(idx[s]) * d.features], d.features,
                &f.acts[0][std::size_t(s) * d.features]);
    f.labels.push_back(d.y[idx[s]]);
  }
  for (std::size_t l = 0; l < p.size(); ++l) {
    const Layer& L = p[l];
    const bool hidden = l + 1 < p.size();
    std::vector<float> out(std::size_t(n) * L.out);
    for (int s = 0; s < n; ++s) {
      const float* a = &f.acts[l][std::size_t(s) * L.in];
      for (int o = 0; o < L.out; ++o) {
        float z = L.b[o];
        for (int i = 0; i < L.in; ++i) z += L.w[std::size_t(o) * L.in + i] * a[i];
        out[std::size_t(s) * L.out + o] = hidden ? std::tanh(z) : z;
      }
    }
    f.acts.push_back(std::move(out));
  }
  return f;
}

/// Mean softmax cross-entropy over the batch; `delta` gets dLoss/dlogits of each sample
/// (softmax - onehot, not yet divided by the batch size).
inline double softmax_xent(const Forward& f, std::vector<float>& delta) {
  const std::vector<float>& logits = f.acts.back();
  const int n = static_cast<int>(f.labels.size()), c = static_cast<int>(logits.size()) / n;
  delta.assign(logits.size(), 0.0f);
  double loss = 0;
  for (int s = 0; s < n; ++s) {
    const float* z = &logits[std::size_t(s) * c];
    const double m = *std::max_element(z, z + c);
    double sum = 0;
    for (int k = 0; k < c; ++k) sum += std::exp(z[k] - m);
    loss += std::log(sum) - (z[f.labels[s]] - m);
    for (int k = 0; k < c; ++k)
      delta[std::size_t(s) * c + k] =
          static_cast<float>(std::exp(z[k] - m) / sum - (k == f.labels[s]));
  }
  return loss / n;
}

/// Fills `grad` (shaped like p) with the batch-mean gradient, last layer first, and calls
/// on_layer(l) as soon as grad[l] is final, so that its exchange can start while the earlier
/// layers are still being computed. grad[l] is not touched again after on_layer(l).
inline void backward(const Params& p, const Forward& f, std::vector<float> delta, Params& grad,
                     const std::function<void(int)>& on_layer = {}) {
  const int n = static_cast<int>(f.labels.size());
  for (int l = static_cast<int>(p.size()) - 1; l >= 0; --l) {
    const Layer& L = p[l];
    const std::vector<float>& a = f.acts[l];
    std::vector<double> gw(std::size_t(L.out) * L.in, 0.0), gb(L.out, 0.0);  // sums in double
    for (int s = 0; s < n; ++s)
      for (int o = 0; o < L.out; ++o) {
        const double dz = delta[std::size_t(s) * L.out + o];
        gb[o] += dz;
        for (int i = 0; i < L.in; ++i)
          gw[std::size_t(o) * L.in + i] += dz * a[std::size_t(s) * L.in + i];
      }
    for (std::size_t k = 0; k < gw.size(); ++k) grad[l].w[k] = static_cast<float>(gw[k] / n);
    for (int o = 0; o < L.out; ++o) grad[l].b[o] = static_cast<float>(gb[o] / n);
    if (on_layer) on_layer(l);
    if (l == 0) break;
    std::vector<float> prev(std::size_t(n) * L.in);  // through W^T, then tanh' = 1 - a^2
    for (int s = 0; s < n; ++s)
      for (int i = 0; i < L.in; ++i) {
        float sum = 0;
        for (int o = 0; o < L.out; ++o)
          sum += L.w[std::size_t(o) * L.in + i] * delta[std::size_t(s) * L.out + o];
        const float ai = a[std::size_t(s) * L.in + i];
        prev[std::size_t(s) * L.in + i] = sum * (1.0f - ai * ai);
      }
    delta = std::move(prev);
  }
}

/// Forward plus backward: returns the batch-mean loss and fills `grad` as backward() does.
inline double loss_and_grad(const Params& p, const Dataset& d, std::span<const int> idx,
                            Params& grad, const std::function<void(int)>& on_layer = {}) {
  Forward f = forward(p, d, idx);
  std::vector<float> delta;
  const double loss = softmax_xent(f, delta);
  backward(p, f, std::move(delta), grad, on_layer);
  return loss;
}

inline void sgd(Params& p, const Params& grad, float lr) {
  for (std::size_t l = 0; l < p.size(); ++l) {
    for (std::size_t k = 0; k < p[l].w.size(); ++k) p[l].w[k] -= lr * grad[l].w[k];
    for (std::size_t k = 0; k < p[l].b.size(); ++k) p[l].b[k] -= lr * grad[l].b[k];
  }
}

/// Steps per epoch: every worker takes the same number, limited by the smallest shard.
inline int steps_per_epoch(int samples, int workers, int batch) {
  return (samples / workers) / (batch / workers);
}

/// Sample indices of worker w's mini-batch at `step` (B/N consecutive samples of its shard).
inline std::vector<int> worker_batch(int samples, int workers, int batch, int w, int step) {
  const int local = batch / workers;
  const int begin = static_cast<int>(std::int64_t(w) * samples / workers) + step * local;
  std::vector<int> idx(local);
  for (int k = 0; k < local; ++k) idx[k] = begin + k;
  return idx;
}

/// Largest relative difference over the parameter tensors: max|a - ref| / max(max|ref|, 1e-3)
/// per tensor (each weight matrix, each bias vector). Per tensor rather than per element: an
/// element that crosses zero keeps the absolute float rounding it collected while it was large,
/// so an element-wise ratio would measure luck rather than agreement.
inline double max_rel_diff(const Params& a, const Params& ref) {
  double worst = 0;
  auto tensor = [&](const std::vector<float>& x, const std::vector<float>& r) {
    double diff = 0, scale = 1e-3;
    for (std::size_t k = 0; k < x.size(); ++k) {
      diff = std::max(diff, std::abs(double(x[k]) - double(r[k])));
      scale = std::max(scale, std::abs(double(r[k])));
    }
    worst = std::max(worst, diff / scale);
  };
  for (std::size_t l = 0; l < ref.size(); ++l) tensor(a[l].w, ref[l].w), tensor(a[l].b, ref[l].b);
  return worst;
}

struct Hyper {
  int epochs = 20, batch = 256;
  float lr = 0.1f;
  std::uint32_t seed = 1;
};

struct Trained {
  Params params;
  std::vector<double> epoch_loss;  ///< mean training loss of each epoch
};

/// The whole training in one process, with exactly the batches `workers` workers would use.
inline Trained train_reference(const Dataset& d, const Hyper& h, int workers) {
  Trained t{init_params(h.seed), {}};
  Params grad = zeros_like(t.params);
  const int steps = steps_per_epoch(d.size(), workers, h.batch);
  for (int e = 0; e < h.epochs; ++e) {
    double sum = 0;
    for (int step = 0; step < steps; ++step) {
      std::vector<int> idx;
      for (int w = 0; w < workers; ++w) {
        std::vector<int> part = worker_batch(d.size(), workers, h.batch, w, step);
        idx.insert(idx.end(), part.begin(), part.end());
      }
      sum += loss_and_grad(t.params, d, idx, grad);
      sgd(t.params, grad, h.lr);
    }
    t.epoch_loss.push_back(sum / steps);
  }
  return t;
}

}  // namespace mlp
