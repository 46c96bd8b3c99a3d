#pragma once
// The parameter tensors of two real networks, generated from their architectures, so that a
// benchmark can exchange the gradients of one backward pass as a trainer would: many tensors
// of very different sizes instead of one. Shapes only (no values); names as torchvision gives
// them (`layer2.0.downsample.0.weight`), in forward order: index 0 is the first layer's.
//
//   resnet50  He et al. 2015, ImageNet: a 7x7 stem, four stages of bottleneck blocks
//             ([3, 4, 6, 3] blocks of 1x1, 3x3, 1x1 convolutions, each followed by batch norm;
//             the first block of a stage projects its input with a 1x1 convolution), fc
//             2048 -> 1000. Convolutions have no bias (batch norm follows them).
//   vgg16     Simonyan & Zisserman 2014, configuration D, without batch norm: 13 3x3
//             convolutions with bias, then fc 25088 -> 4096 -> 4096 -> 1000 with bias.
//
// Nothing here depends on byteps; tests/unit/test_model_mix.cpp checks the generators.

#include <cstddef>
#include <functional>
#include <iterator>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bench::model {

struct param_tensor {
  std::string name;                // torchvision's parameter name
  std::vector<std::size_t> shape;  // conv [out, in, kh, kw]; fc [out, in]; bias, bn [channels]

  std::size_t elements() const {
    return std::accumulate(shape.begin(), shape.end(), std::size_t{1}, std::multiplies<>{});
  }
};

struct mix {
  std::string name;
  std::vector<param_tensor> tensors;  // forward order: the first layer's tensors first

  std::size_t parameters() const {
    std::size_t total = 0;
    for (const auto& t : tensors) total += t.elements();
    return total;
  }
};

namespace detail {

inline void add_conv(mix& m, const std::string& name, std::size_t out, std::size_t in,
                     std::size_t kernel, bool bias) {
  m.tensors.push_back({name + ".weight", {out, in, kernel, kernel}});
  if (bias) m.tensors.push_back({name + ".bias", {out}});
}

// Batch norm learns a scale (gamma, torchvision's "weight") and a shift (beta, "bias") per
// channel; its running mean and variance are buffers, not parameters, and get no gradient.
inline void add_batch_norm(mix& m, const std::string& name, std::size_t channels) {
  m.tensors.push_back({name + ".weight", {channels}});
  m.tensors.push_back({name + ".bias", {channels}});
}

inline void add_linear(mix& m, const std::string& name, std::size_t out, std::size_t in) {
  m.tensors.push_back({name + ".weight", {out, in}});
  m.tensors.push_back({name + ".bias", {out}});
}

}  // namespace detail

inline mix resnet50() {
  constexpr std::size_t expansion = 4;  // a bottleneck's output has 4x its inner width
  struct stage {
    std::size_t width;  // the 3x3 convolution's channels
    int blocks;
  };
  constexpr stage stages[] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
  constexpr std::size_t classes = 1000;

  mix m{"resnet50", {}};
  detail::add_conv(m, "conv1", 64, 3, 7, false);
  detail::add_batch_norm(m, "bn1", 64);
  std::size_t channels = 64;  // into the next block
  for (std::size_t s = 0; s < std::size(stages); ++s) {
    const auto [width, blocks] = stages[s];
    for (int b = 0; b < blocks; ++b) {
      const std::string block = "layer" + std::to_string(s + 1) + "." + std::to_string(b);
      detail::add_conv(m, block + ".conv1", width, channels, 1, false);
      detail::add_batch_norm(m, block + ".bn1", width);
      detail::add_conv(m, block + ".conv2", width, width, 3, false);
      detail::add_batch_norm(m, block + ".bn2", width);
      detail::add_conv(m, block + ".conv3", width * expansion, width, 1, false);
      detail::add_batch_norm(m, block + ".bn3", width * expansion);
      // The residual is added to the block's output: where the channel count (or, from stage
      // 2 on, the resolution) changes, the first block projects it with a 1x1 convolution.
      if (b == 0) {
        detail::add_conv(m, block + ".downsample.0", width * expansion, channels, 1, false);
        detail::add_batch_norm(m, block + ".downsample.1", width * expansion);
      }
      channels = width * expansion;
    }
  }
  detail::add_linear(m, "fc", classes, channels);
  return m;
}

inline mix vgg16() {
  struct stage {
    std::size_t width;  // output channels of each 3x3 convolution
    int convolutions;   // then a 2x2 max pool (no parameters)
  };
  constexpr stage stages[] = {{64, 2}, {128, 2}, {256, 3}, {512, 3}, {512, 3}};  // config D
  constexpr std::size_t pooled_side = 7;  // 224 / 2^5; torchvision pools adaptively to 7x7
  constexpr std::size_t hidden = 4096, classes = 1000;

  mix m{"vgg16", {}};
  std::size_t channels = 3;
  // torchvision numbers the modules of `features` and `classifier` in sequence, ReLUs, pools
  // and dropouts included: a convolution and its ReLU take two indices, a pool one.
  std::size_t module = 0;
  for (const auto [width, convolutions] : stages) {
    for (int c = 0; c < convolutions; ++c) {
      detail::add_conv(m, "features." + std::to_string(module), width, channels, 3, true);
      module += 2;
      channels = width;
    }
    ++module;
  }
  const std::size_t flattened = channels * pooled_side * pooled_side;
  // classifier: linear, ReLU, dropout, linear, ReLU, dropout, linear.
  detail::add_linear(m, "classifier.0", hidden, flattened);
  detail::add_linear(m, "classifier.3", hidden, hidden);
  detail::add_linear(m, "classifier.6", classes, hidden);
  return m;
}

/// The names `by_name` knows, for help texts and error messages.
inline constexpr std::string_view known_names = "resnet50, vgg16";

inline std::optional<mix> by_name(std::string_view name) {
  if (name == "resnet50") return resnet50();
  if (name == "vgg16") return vgg16();
  return std::nullopt;
}

/// The counts the papers' reference implementations report (torchvision's `num_params`):
/// a generator that disagrees has walked the architecture wrongly, and a benchmark of the
/// wrong mix would be mislabelled, so the benchmarks refuse to run it.
inline void check_published_counts(const mix& m) {
  struct published {
    std::string_view name;
    std::size_t tensors, parameters;
  };
  constexpr published counts[] = {{"resnet50", 161, 25'557'032}, {"vgg16", 32, 138'357'544}};
  for (const auto& c : counts) {
    if (c.name != m.name) continue;
    if (m.tensors.size() != c.tensors || m.parameters() != c.parameters)
      throw std::logic_error(m.name + ": the generator gives " + std::to_string(m.tensors.size()) +
                             " tensors and " + std::to_string(m.parameters()) +
                             " parameters; the architecture has " + std::to_string(c.tensors) +
                             " and " + std::to_string(c.parameters));
    return;
  }
  throw std::logic_error(m.name + ": no published counts to check the generator against");
}

}  // namespace bench::model
