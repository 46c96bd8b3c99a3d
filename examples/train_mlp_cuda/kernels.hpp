#pragma once
// The MLP of examples/mlp.hpp on the GPU: one small kernel per step of forward, loss, backward
// and SGD. Every kernel computes each output element in one thread, in the same order as the
// host code in mlp.hpp, with rounded float operations (no fused multiply-add), so that every
// worker computes the same bits from the same inputs. Declared here in plain C++ so that the
// trainer is compiled by the host compiler and only kernels.cu by nvcc.

#include <cuda_runtime_api.h>

namespace mlp_cuda {

/// out[s][o] = b[o] + sum_i w[o][i] * a[s][i], then tanh when `hidden`. a: n x in, w: out x in.
void forward_layer(const float* a, const float* w, const float* b, float* out, int n, int in,
                   int out_width, bool hidden, cudaStream_t stream);

/// Per sample: loss[s] = log-sum-exp of the logits minus the label's logit; delta[s][k] =
/// softmax - onehot (not yet divided by n). logits: n x classes.
void softmax_xent(const float* logits, const int* labels, float* delta, double* loss, int n,
                  int classes, cudaStream_t stream);

/// gw[o][i] = mean over s of delta[s][o] * a[s][i]; gb[o] = mean of delta[s][o] (sums in double).
void layer_gradient(const float* delta, const float* a, float* gw, float* gb, int n, int in,
                    int out_width, cudaStream_t stream);

/// prev[s][i] = (sum_o w[o][i] * delta[s][o]) * (1 - a[s][i]^2): delta through a tanh layer.
void backprop(const float* w, const float* delta, const float* a, float* prev, int n, int in,
              int out_width, cudaStream_t stream);

/// p -= lr * g.
void sgd(float* p, const float* g, float lr, int count, cudaStream_t stream);

}  // namespace mlp_cuda
