#pragma once
/// @file
/// `bps::torch::accumulation_hooks`: runs a callback just before autograd adds a gradient into
/// a parameter's `.grad`, and one just after, so that the gradient can be push_pulled in place,
/// the moment it is final, while backward goes on with the layers before it.
///
/// Why hooks on the AccumulateGrad node, and not a tensor hook:
/// - libtorch 1.13 has no hook that runs after accumulation on the tensor itself
///   (`register_post_accumulate_grad_hook` came in PyTorch 2.1).
/// - `Tensor::register_hook` on a leaf runs *before* accumulation and receives the incoming
///   gradient. AccumulateGrad then either steals that tensor as `.grad` or adds it into the
///   `.grad` it has: pushing it from the hook would mean copying it out (the buffer is written
///   after the hook returns, while the transport reads it) and copying the sum back in.
/// - The node that writes `.grad` is the parameter's AccumulateGrad
///   (`torch::autograd::impl::grad_accumulator`). A *post* hook on it runs once `.grad` holds
///   the accumulated gradient; nothing touches that tensor again until the next backward pass
///   or `zero_grad`, so `push_pull` reads it and writes the sum into it in place: no copy.
/// - A *pre* hook on the same node runs before the addition: it can refuse a gradient for a
///   parameter whose exchange is still in flight before anything is written into the buffer
///   the transport reads.
/// - A parameter holds only a weak pointer to its AccumulateGrad node: once no graph holds it,
///   the next forward pass makes a new one, without hooks. This object holds it, so every
///   graph uses the same node, and the hooks stay.
/// The autograd engine runs a CPU parameter's AccumulateGrad on the thread that called
/// `backward()`, so for CPU tensors the callbacks run there, one at a time.
///
/// The callbacks may throw: the exception leaves `backward()` (a pre hook's before `.grad` is
/// touched). Destroying this object removes the post hook; the pre hook (libtorch 1.13 cannot
/// remove one) stays on the node but calls nothing any more. Neither may happen while a
/// backward pass through the parameter runs.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "byteps/core/error.hpp"

namespace bps::torch {

class accumulation_hooks {
 public:
  using callback = std::function<void()>;

  /// `param` must be a leaf that requires grad. `before` runs before autograd accumulates a
  /// gradient into `param.grad()`, `after` once it has.
  accumulation_hooks(const at::Tensor& param, callback before, callback after)
      : state_(std::make_shared<state>(std::move(before), std::move(after))) {
    if (!param.requires_grad() || !param.is_leaf())
      throw usage_error("bps::torch::accumulation_hooks: the tensor must be a leaf that "
                        "requires grad (a parameter)");
    node_ = ::torch::autograd::impl::grad_accumulator(param);
    if (!node_)
      throw usage_error("bps::torch::accumulation_hooks: the tensor has no gradient accumulator");
    node_->add_pre_hook(std::make_unique<pre_hook>(state_));
    post_key_ = node_->add_post_hook(std::make_unique<post_hook>(state_));
  }

  accumulation_hooks(const accumulation_hooks&) = delete;
  accumulation_hooks& operator=(const accumulation_hooks&) = delete;

  ~accumulation_hooks() {
    state_->alive.store(false);
    node_->del_post_hook(post_key_);
  }

 private:
  struct state {
    state(callback b, callback a) : before(std::move(b)), after(std::move(a)) {}
    std::atomic<bool> alive{true};
    callback before, after;
  };

  struct pre_hook final : ::torch::autograd::FunctionPreHook {
    explicit pre_hook(std::shared_ptr<state> s) : s_(std::move(s)) {}
    ::torch::autograd::variable_list operator()(
        const ::torch::autograd::variable_list& grads) override {
      if (s_->alive.load()) s_->before();
      return grads;
    }
    std::shared_ptr<state> s_;
  };

  struct post_hook final : ::torch::autograd::FunctionPostHook {
    explicit post_hook(std::shared_ptr<state> s) : s_(std::move(s)) {}
    ::torch::autograd::variable_list operator()(
        const ::torch::autograd::variable_list& outputs,
        const ::torch::autograd::variable_list& /*inputs*/) override {
      if (s_->alive.load()) s_->after();
      return outputs;
    }
    std::shared_ptr<state> s_;
  };

  std::shared_ptr<state> state_;
  std::shared_ptr<::torch::autograd::Node> node_;
  std::uintptr_t post_key_ = 0;
};

}  // namespace bps::torch
