// Kernels of the train_mlp_cuda example (see kernels.hpp). __fmul_rn/__fadd_rn keep nvcc from
// fusing a multiply and an add, so the arithmetic is the host's, operation by operation.
#include "kernels.hpp"

namespace mlp_cuda {
namespace {

constexpr int threads = 256;

int blocks(long long work) { return static_cast<int>((work + threads - 1) / threads); }

__global__ void forward_kernel(const float* a, const float* w, const float* b, float* out, int n,
                               int in, int out_width, bool hidden) {
  const long long k = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= static_cast<long long>(n) * out_width) return;
  const int s = static_cast<int>(k / out_width), o = static_cast<int>(k % out_width);
  float z = b[o];
  for (int i = 0; i < in; ++i)
    z = __fadd_rn(z, __fmul_rn(w[static_cast<long long>(o) * in + i],
                               a[static_cast<long long>(s) * in + i]));
  out[k] = hidden ? tanhf(z) : z;
}

__global__ void softmax_kernel(const float* logits, const int* labels, float* delta, double* loss,
                               int n, int classes) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const float* z = logits + static_cast<long long>(s) * classes;
  double m = z[0];
  for (int k = 1; k < classes; ++k) m = fmax(m, static_cast<double>(z[k]));
  double sum = 0;
  for (int k = 0; k < classes; ++k) sum += exp(z[k] - m);
  loss[s] = log(sum) - (z[labels[s]] - m);
  for (int k = 0; k < classes; ++k)
    delta[static_cast<long long>(s) * classes + k] =
        static_cast<float>(exp(z[k] - m) / sum - (k == labels[s] ? 1.0 : 0.0));
}

__global__ void gradient_kernel(const float* delta, const float* a, float* gw, float* gb, int n,
                                int in, int out_width) {
  const long long k = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long weights = static_cast<long long>(out_width) * in;
  if (k < weights) {
    const int o = static_cast<int>(k / in), i = static_cast<int>(k % in);
    double sum = 0;
    for (int s = 0; s < n; ++s)
      sum += static_cast<double>(delta[static_cast<long long>(s) * out_width + o]) *
             a[static_cast<long long>(s) * in + i];
    gw[k] = static_cast<float>(sum / n);
  } else if (k < weights + out_width) {
    const int o = static_cast<int>(k - weights);
    double sum = 0;
    for (int s = 0; s < n; ++s) sum += delta[static_cast<long long>(s) * out_width + o];
    gb[o] = static_cast<float>(sum / n);
  }
}

__global__ void backprop_kernel(const float* w, const float* delta, const float* a, float* prev,
                                int n, int in, int out_width) {
  const long long k = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= static_cast<long long>(n) * in) return;
  const int s = static_cast<int>(k / in), i = static_cast<int>(k % in);
  float sum = 0;
  for (int o = 0; o < out_width; ++o)
    sum = __fadd_rn(sum, __fmul_rn(w[static_cast<long long>(o) * in + i],
                                   delta[static_cast<long long>(s) * out_width + o]));
  const float ai = a[k];
  prev[k] = __fmul_rn(sum, __fsub_rn(1.0f, __fmul_rn(ai, ai)));
}

__global__ void sgd_kernel(float* p, const float* g, float lr, int count) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < count) p[k] = __fsub_rn(p[k], __fmul_rn(lr, g[k]));
}

}  // namespace

void forward_layer(const float* a, const float* w, const float* b, float* out, int n, int in,
                   int out_width, bool hidden, cudaStream_t stream) {
  forward_kernel<<<blocks(static_cast<long long>(n) * out_width), threads, 0, stream>>>(
      a, w, b, out, n, in, out_width, hidden);
}

void softmax_xent(const float* logits, const int* labels, float* delta, double* loss, int n,
                  int classes, cudaStream_t stream) {
  softmax_kernel<<<blocks(n), threads, 0, stream>>>(logits, labels, delta, loss, n, classes);
}

void layer_gradient(const float* delta, const float* a, float* gw, float* gb, int n, int in,
                    int out_width, cudaStream_t stream) {
  gradient_kernel<<<blocks(static_cast<long long>(out_width) * in + out_width), threads, 0,
                    stream>>>(delta, a, gw, gb, n, in, out_width);
}

void backprop(const float* w, const float* delta, const float* a, float* prev, int n, int in,
              int out_width, cudaStream_t stream) {
  backprop_kernel<<<blocks(static_cast<long long>(n) * in), threads, 0, stream>>>(
      w, delta, a, prev, n, in, out_width);
}

void sgd(float* p, const float* g, float lr, int count, cudaStream_t stream) {
  sgd_kernel<<<blocks(count), threads, 0, stream>>>(p, g, lr, count);
}

}  // namespace mlp_cuda
