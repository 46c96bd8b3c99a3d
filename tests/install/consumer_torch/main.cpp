// A program outside byteps built against an installed byteps with the torch component: the
// plugin's headers compile with libtorch's and the program links libtorch. It maps a tensor's
// dtype and has a tensor on another device refused with the plugin's message.
#include <byteps/torch.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <string>

int main() {
  const torch::Tensor grad = torch::zeros({4}, torch::kBFloat16);
  if (bps::torch::check_exchangeable(grad, "tensor 'g'") != bps::dtype::bfloat16) {
    std::printf("consumer_torch: a bfloat16 tensor did not map to bps::dtype::bfloat16\n");
    return 1;
  }
  try {
    bps::torch::check_exchangeable(torch::zeros({4}, torch::Device(torch::kMeta)), "tensor 'm'");
  } catch (const bps::usage_error& e) {
    const std::string expected =
        "bps::torch: tensor 'm' is on meta, not the CPU: this plugin exchanges CPU tensors only; "
        "move the module to the CPU (module->to(torch::kCPU))";
    if (expected != e.what()) {
      std::printf("consumer_torch: unexpected message: %s\n", e.what());
      return 1;
    }
    std::printf("consumer_torch: libtorch linked; bfloat16 maps; %s\n", e.what());
    return 0;
  }
  std::printf("consumer_torch: a tensor on the meta device was accepted\n");
  return 1;
}
