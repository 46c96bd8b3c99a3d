#pragma once
// train_torch's seeded synthetic data sets, the same on every worker (made from the seed
// alone), so that each worker takes its share of a global batch by index:
// - images: 3x32x32 samples drawn from N(0, 1); the label of each is the argmax of a fixed
//   random linear "teacher" over its pixels (learnable, not trivially).
// - tokens: sequences of `context + 1` tokens from a noisy permutation chain: the next token
//   is perm[previous] with probability 0.9, else uniform (a language model can learn perm).
// Sample i of step s on worker r of n: the global batch of step s is samples
// [s*G, (s+1)*G) of the set (G the global batch, the set holding exactly one epoch), and
// worker r takes its r-th slice of G/n.

#include <torch/torch.h>

#include <cstdint>

namespace train_torch {

struct Dataset {
  torch::Tensor inputs;   // images [N, 3, 32, 32] float, or tokens [N, T] int64
  torch::Tensor targets;  // labels [N] int64, or next tokens [N, T] int64
};

inline Dataset make_images(uint64_t seed, int64_t n) {
  torch::manual_seed(seed);
  torch::Tensor x = torch::randn({n, 3, 32, 32});
  torch::Tensor teacher = torch::randn({3 * 32 * 32, 10});
  torch::Tensor y = x.reshape({n, -1}).matmul(teacher).argmax(1);
  return {x, y};
}

inline Dataset make_tokens(uint64_t seed, int64_t n, int64_t context, int64_t vocab) {
  torch::manual_seed(seed);
  torch::Tensor perm = torch::randperm(vocab);
  torch::Tensor seq = torch::empty({n, context + 1}, torch::kLong);
  seq.select(1, 0).copy_(torch::randint(vocab, {n}));
  for (int64_t t = 1; t <= context; ++t) {
    torch::Tensor follow = perm.index_select(0, seq.select(1, t - 1));
    torch::Tensor noise = torch::randint(vocab, {n});
    torch::Tensor keep = torch::rand({n}) < 0.9;
    seq.select(1, t).copy_(torch::where(keep, follow, noise));
  }
  return {seq.slice(1, 0, context), seq.slice(1, 1, context + 1)};
}

/// Rows [first, first + count) of the set.
inline Dataset slice(const Dataset& d, int64_t first, int64_t count) {
  return {d.inputs.slice(0, first, first + count), d.targets.slice(0, first, first + count)};
}

}  // namespace train_torch
