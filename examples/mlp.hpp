#pragma once
/// @file
/// Everything of the train_mlp example that is not communication, in plain C++20: a synthetic
/// classification data set, an MLP of any widths (tanh hidden layers, softmax cross-entropy),
/// forward, backward with a per-layer callback, SGD, and a single-process reference trainer.
/// The matrix products run in i-k-j order: the innermost loop walks a row of the output and a
/// row of one operand, both contiguous, so that the compiler vectorizes it, and the outer loops
/// keep the rows they reuse in the cache. Every output element is still summed in the same
/// order as by the textbook loops (bias first, then ascending index), so the results are the
/// same bits as theirs. No BLAS, no threads: one core per process.
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

/// out (n x L.out) = act(a (n x L.in) W^T + b), act = tanh for hidden layers. Computed
/// transposed, z^T = W a^T, in i-k-j order: for each output o and input i, the inner loop runs
/// over the samples along a row of a^T and of z^T, both contiguous, and W is read row by row.
/// (Transposing a, n x in, is cheap; transposing W, out x in, is not.)
inline void forward_layer(const Layer& L, const float* a, int n, bool hidden, float* out) {
  std::vector<float> at(std::size_t(L.in) * n), zt(std::size_t(n) * L.out);
  for (int s = 0; s < n; ++s)
    for (int i = 0; i < L.in; ++i) at[std::size_t(i) * n + s] = a[std::size_t(s) * L.in + i];
  for (int o = 0; o < L.out; ++o) {
    float* z = &zt[std::size_t(o) * n];
    std::fill_n(z, n, L.b[o]);
    const float* w = &L.w[std::size_t(o) * L.in];
    for (int i = 0; i < L.in; ++i) {
      const float wi = w[i];
      const float* ai = &at[std::size_t(i) * n];
      for (int s = 0; s < n; ++s) z[s] += wi * ai[s];
    }
  }
  for (int s = 0; s < n; ++s)
    for (int o = 0; o < L.out; ++o) {
      const float z = zt[std::size_t(o) * n + s];
      out[std::size_t(s) * L.out + o] = hidden ? std::tanh(z) : z;
    }
}

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
    std::vector<float> out(std::size_t(n) * p[l].out);
    forward_layer(p[l], f.acts[l].data(), n, l + 1 < p.size(), out.data());
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
    // grad W[o][:] = mean over s of delta[s][o] * a[s][:], summed in double in sample order,
    // for 4 output rows at a time: each row of `a` is read once for the 4, and their
    // accumulators (4 x in doubles) stay in the cache. Rows past L.out get delta 0, unused.
    constexpr int rows = 4;
    std::vector<double> acc(std::size_t(rows) * L.in);
    for (int o0 = 0; o0 < L.out; o0 += rows) {
      const int r = std::min(rows, L.out - o0);
      std::fill(acc.begin(), acc.end(), 0.0);
      double gb[rows] = {};
      for (int s = 0; s < n; ++s) {
        double dz[rows] = {};
        for (int j = 0; j < r; ++j) dz[j] = delta[std::size_t(s) * L.out + o0 + j];
        for (int j = 0; j < rows; ++j) gb[j] += dz[j];
        const float* as = &a[std::size_t(s) * L.in];
        double* a0 = &acc[0];
        double* a1 = &acc[std::size_t(L.in)];
        double* a2 = &acc[2 * std::size_t(L.in)];
        double* a3 = &acc[3 * std::size_t(L.in)];
        for (int i = 0; i < L.in; ++i) {
          const double x = as[i];
          a0[i] += dz[0] * x;
          a1[i] += dz[1] * x;
          a2[i] += dz[2] * x;
          a3[i] += dz[3] * x;
        }
      }
      for (int j = 0; j < r; ++j) {
        float* gw = &grad[l].w[std::size_t(o0 + j) * L.in];
        for (int i = 0; i < L.in; ++i)
          gw[i] = static_cast<float>(acc[std::size_t(j) * L.in + i] / n);
        grad[l].b[o0 + j] = static_cast<float>(gb[j] / n);
      }
    }
    if (on_layer) on_layer(l);
    if (l == 0) break;
    // Through W^T, then tanh' = 1 - a^2: prev[s][:] = sum over o of delta[s][o] * W[o][:],
    // for a block of 8 samples at a time, whose rows stay in the L1 cache while each row of W
    // is applied to all of them.
    constexpr int block = 8;
    std::vector<float> prev(std::size_t(n) * L.in, 0.0f);
    for (int s0 = 0; s0 < n; s0 += block) {
      const int s1 = std::min(n, s0 + block);
      for (int o = 0; o < L.out; ++o) {
        const float* w = &L.w[std::size_t(o) * L.in];
        for (int s = s0; s < s1; ++s) {
          const float dz = delta[std::size_t(s) * L.out + o];
          float* ps = &prev[std::size_t(s) * L.in];
          for (int i = 0; i < L.in; ++i) ps[i] += w[i] * dz;
        }
      }
    }
    for (std::size_t k = 0; k < prev.size(); ++k) prev[k] *= 1.0f - a[k] * a[k];
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
  std::vector<int> hidden = {64, 64};  ///< widths of the hidden layers
};

/// Widths of every layer, input and output included: {features, hidden..., classes}.
inline std::vector<int> layer_sizes(const Dataset& d, const std::vector<int>& hidden) {
  std::vector<int> sizes{d.features};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(d.classes);
  return sizes;
}

/// FNV-1a, 64 bit, over the bytes of every weight and bias, layer by layer: two runs' final
/// parameters compare bit for bit by it.
inline std::uint64_t digest(const Params& p) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&](const std::vector<float>& v) {
    const auto* b = reinterpret_cast<const unsigned char*>(v.data());
    for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  for (const auto& layer : p) {
    add(layer.w);
    add(layer.b);
  }
  return h;
}

struct Trained {
  Params params;
  std::vector<double> epoch_loss;  ///< mean training loss of each epoch
};

/// The whole training in one process, with exactly the batches `workers` workers would use.
inline Trained train_reference(const Dataset& d, const Hyper& h, int workers) {
  Trained t{init_params(h.seed, layer_sizes(d, h.hidden)), {}};
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
