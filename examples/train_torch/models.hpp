#pragma once
// train_torch's two models, plain libtorch modules:
// - `cnn`: a small ResNet for 3x32x32 images and 10 classes: a 3x3 stem of 16 channels, three
//   stages of one residual block each (16, 32, 64 channels; the second and third halve the
//   image with a stride-2 convolution), global average pooling, a linear classifier. GroupNorm
//   instead of BatchNorm: it normalises each sample alone, so data-parallel training over N
//   workers computes what one process computes over the global batch (BatchNorm's statistics
//   would be each worker's own).
// - `transformer`: a decoder-only language model: token and position embeddings, `layers`
//   pre-built torch::nn::TransformerEncoderLayer blocks under a causal mask, a final
//   LayerNorm and an untied output projection. The defaults (vocabulary 16384, width 512,
//   4 layers, 8 heads, 2048 feed-forward) make 29.4 M parameters, two thirds of them in the
//   two embedding matrices: the communication-heavy model. Dropout is 0 so that every run is
//   deterministic.

#include <torch/torch.h>

#include <cstdint>

namespace train_torch {

struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t channels)
      : conv1(torch::nn::Conv2dOptions(channels, channels, 3).padding(1).bias(false)),
        conv2(torch::nn::Conv2dOptions(channels, channels, 3).padding(1).bias(false)),
        norm1(torch::nn::GroupNormOptions(4, channels)),
        norm2(torch::nn::GroupNormOptions(4, channels)) {
    register_module("conv1", conv1);
    register_module("norm1", norm1);
    register_module("conv2", conv2);
    register_module("norm2", norm2);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(norm1(conv1(x)));
    return torch::relu(x + norm2(conv2(y)));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::GroupNorm norm1, norm2;
};
TORCH_MODULE(ResidualBlock);

struct ResNetImpl : torch::nn::Module {
  ResNetImpl()
      : stem(torch::nn::Conv2dOptions(3, 16, 3).padding(1).bias(false)),
        stem_norm(torch::nn::GroupNormOptions(4, 16)),
        block1(16),
        down2(torch::nn::Conv2dOptions(16, 32, 3).stride(2).padding(1).bias(false)),
        block2(32),
        down3(torch::nn::Conv2dOptions(32, 64, 3).stride(2).padding(1).bias(false)),
        block3(64),
        head(64, 10) {
    register_module("stem", stem);
    register_module("stem_norm", stem_norm);
    register_module("block1", block1);
    register_module("down2", down2);
    register_module("block2", block2);
    register_module("down3", down3);
    register_module("block3", block3);
    register_module("head", head);
  }
  torch::Tensor forward(const torch::Tensor& images) {  // [B, 3, 32, 32] -> logits [B, 10]
    torch::Tensor x = torch::relu(stem_norm(stem(images)));
    x = block1(x);
    x = block2(torch::relu(down2(x)));
    x = block3(torch::relu(down3(x)));
    return head(x.mean({2, 3}));
  }
  torch::nn::Conv2d stem;
  torch::nn::GroupNorm stem_norm;
  ResidualBlock block1;
  torch::nn::Conv2d down2;
  ResidualBlock block2;
  torch::nn::Conv2d down3;
  ResidualBlock block3;
  torch::nn::Linear head;
};
TORCH_MODULE(ResNet);

struct LMShape {
  int64_t vocab = 16384, width = 512, layers = 4, heads = 8, feed_forward = 2048, context = 64;
};

struct TransformerLMImpl : torch::nn::Module {
  explicit TransformerLMImpl(const LMShape& s)
      : embed(s.vocab, s.width), norm(torch::nn::LayerNormOptions({s.width})), out(nullptr) {
    // Built in benchmarks/torch_ddp.py's order (the output projection last), so that both
    // draw the same initial values from the seed.
    register_module("embed", embed);
    position = register_parameter("position", torch::randn({s.context, s.width}) * 0.02);
    for (int64_t l = 0; l < s.layers; ++l) {
      blocks.push_back(torch::nn::TransformerEncoderLayer(
          torch::nn::TransformerEncoderLayerOptions(s.width, s.heads)
              .dim_feedforward(s.feed_forward)
              .dropout(0.0)));
      register_module("block" + std::to_string(l), blocks.back());
    }
    register_module("norm", norm);
    out = register_module("out", torch::nn::Linear(s.width, s.vocab));
  }
  torch::Tensor forward(const torch::Tensor& tokens) {  // [B, T] -> logits [B, T, vocab]
    const int64_t t = tokens.size(1);
    torch::Tensor x = embed(tokens) + position.slice(0, 0, t);
    x = x.transpose(0, 1);  // [T, B, width]: the layers take the sequence first
    const torch::Tensor mask =
        torch::full({t, t}, -std::numeric_limits<float>::infinity()).triu(1);
    for (auto& block : blocks) x = block(x, mask);
    return out(norm(x.transpose(0, 1)));
  }
  torch::nn::Embedding embed;
  torch::Tensor position;
  std::vector<torch::nn::TransformerEncoderLayer> blocks;
  torch::nn::LayerNorm norm;
  torch::nn::Linear out;
};
TORCH_MODULE(TransformerLM);

}  // namespace train_torch
