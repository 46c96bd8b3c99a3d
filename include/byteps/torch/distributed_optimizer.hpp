#pragma once
/// @file
/// `bps::torch::DistributedOptimizer`: data-parallel training of a libtorch module through
/// byteps, as `byteps.torch.DistributedOptimizer` does for PyTorch. It wraps the trainer's own
/// `torch::optim::Optimizer` and the module's named parameters:
///
///     bps::torch::DistributedOptimizer opt(comm, sgd, model->named_parameters());
///     loss.backward();  // each gradient is push_pulled the moment autograd has it
///     opt.step();       // waits for the sums, then steps the wrapped optimizer
///     opt.zero_grad();
///
/// - Each parameter's gradient is handed to `push_pull` as soon as autograd has accumulated it
///   (accumulation_hooks.hpp says how and why), in place in `param.grad()`: no copy. The
///   exchange overlaps the rest of the backward pass.
/// - Priorities: the first parameter given (the first layer, which the next forward pass needs
///   first) has the highest, the last the lowest, as BytePS's plugins number them. As in
///   BytePS, the scheduler orders by them only when asked (`BYTEPS_SCHEDULING_PRIORITY=1`);
///   by default gradients go in the order backward produces them, the same on every worker,
///   which is faster while `step()` waits for all of them (docs/performance.md).
/// - `average` (default on): every worker gets the mean over the workers of the gradients.
/// - `backward_passes_per_step` = k: gradients accumulate locally in `.grad` over k backward
///   passes and are exchanged once, during the k-th; `step()` after every k passes. The sum of
///   the k passes is exchanged (not divided by k): scale the loss by 1/k for the mean.
/// - `step()` first push_pulls every gradient backward did not reach (a parameter unused in
///   this forward pass gets a zero gradient, so every worker exchanges the same tensors), waits
///   for all of them, and then steps the wrapped optimizer.
/// - `zero_grad()` throws while any exchange is in flight (it would zero a buffer that the
///   transport is reading); another gradient for a parameter whose exchange is in flight (one
///   backward pass too many before `step()`) is refused before it touches the buffer.
/// - Compression: `compressor` (or `BYTEPS_COMPRESSOR` through `Config` when it is null), as
///   `push_pull_options::compressor`. Error-feedback compressors need the learning rate:
///   `comm.set_learning_rate(lr)`.
/// - Asynchronous training (`async`, set it from `Config::enable_async`): gradients stay local;
///   `step()` steps the wrapped optimizer, push_pulls each parameter's change (the servers add
///   it) and takes the servers' parameters back. The first exchange, when this object is built,
///   gives every worker rank 0's parameters (server/async_sum.hpp).
///
/// - CUDA tensors: with a communicator whose local collective is `bps::local::nccl`
///   (`buffers_of<Comm>`), parameters must be on a CUDA device, and each gradient is exchanged
///   in place in device memory, starting after the work queued on `stream` (libtorch's
///   default stream, the legacy default stream, unless the trainer runs backward on a stream
///   of its own and names it here). With any other communicator, CPU tensors.
///
/// Refused with `bps::usage_error` naming the parameter: a parameter on the wrong device (the
/// CPU, or a CUDA device with `bps::local::nccl`) or of a type byteps cannot carry (when
/// built), a gradient that is sparse or not contiguous (when autograd produces it: the
/// exception leaves `backward()`).
///
/// @par Thread Safety
/// One trainer thread: `backward()`, `step()`, `synchronize()` and `zero_grad()` from the
/// same thread. CPU autograd runs the hooks on the thread that called `backward()`, CUDA
/// autograd on its device thread; what they share with the trainer's thread is under one
/// mutex. The communicator and the wrapped optimizer must outlive this object.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>
#include <torch/utils.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/push_pull_options.hpp"
#include "byteps/torch/accumulation_hooks.hpp"
#include "byteps/torch/tensor_check.hpp"

namespace bps::torch {

/// What a `DistributedOptimizer` does beyond its wrapped optimizer.
struct distributed_options {
  int backward_passes_per_step = 1;  ///< backward passes between two step() calls (>= 1)
  bool average = true;               ///< divide the sum by the number of workers
  /// How gradients are encoded on the wire (`bps::compress::use<C>(...)`, `by_name(...)`);
  /// null: the communicator's `BYTEPS_COMPRESSOR`, or none.
  std::shared_ptr<const compress::spec> compressor = nullptr;
  bool async = false;                ///< asynchronous training: set from Config::enable_async
  std::string prefix = "grad.";      ///< tensor names are prefix + the parameter's name
  /// CUDA tensors only: the `cudaStream_t` backward queues the gradients on
  /// (`push_pull_options::stream`); null is the legacy default stream, libtorch's default.
  void* stream = nullptr;
};

/// The last step's exchange, for a trainer's report.
struct exchange_times {
  double exchange_seconds = 0;  ///< from the first push_pull call to the last one done
  double blocked_seconds = 0;   ///< how long step() (synchronize()) waited for the results
  /// The share of the exchange that overlapped the backward pass (0 .. 1).
  double hidden() const noexcept {
    return exchange_seconds > 0 ? std::max(0.0, 1.0 - blocked_seconds / exchange_seconds) : 0.0;
  }
};

template <class Comm>
class DistributedOptimizer {
 public:
  using clock = std::chrono::steady_clock;
  /// Where the communicator exchanges buffers, so where parameters must be.
  static constexpr buffer_home home = buffers_of<Comm>;
  using named_tensors = ::torch::OrderedDict<std::string, at::Tensor>;

  /// Hooks every parameter of `named_parameters` that requires grad (`module->named_parameters()`,
  /// in the module's order). `optimizer` must have been built from those parameters.
  DistributedOptimizer(Comm& comm, ::torch::optim::Optimizer& optimizer,
                       const named_tensors& named_parameters, distributed_options options = {})
      : comm_(&comm), optimizer_(&optimizer), s_(std::make_shared<shared>()) {
    if (options.backward_passes_per_step < 1)
      throw usage_error("bps::torch::DistributedOptimizer: backward_passes_per_step is " +
                        std::to_string(options.backward_passes_per_step) + "; it must be >= 1");
    if (options.async && options.compressor)
      throw usage_error("bps::torch::DistributedOptimizer: async and a compressor: async servers "
                        "add pushes as they come and do not decode compressed ones; choose one");
    s_->comm = &comm;
    s_->opts = std::move(options);
    std::unordered_set<const void*> seen;
    for (const auto& item : named_parameters) {
      const at::Tensor& p = item.value();
      if (!p.requires_grad()) continue;  // frozen: no gradient to exchange
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;  // shared: hooked once
      slot s;
      s.name = item.key();
      s.key = s_->opts.prefix + s.name;
      s.param = p;
      s.type = check_device_and_type(p, "parameter '" + s.name + "'", home);
      s_->slots.push_back(std::move(s));
    }
    check_optimizer_covered(seen);
    const int n = static_cast<int>(s_->slots.size());
    for (int i = 0; i < n; ++i) s_->slots[i].priority = n - i;  // first layers first
    std::weak_ptr<shared> weak = s_;
    for (int i = 0; i < n; ++i)
      hooks_.push_back(std::make_unique<accumulation_hooks>(
          s_->slots[i].param, [weak, i] { if (auto s = weak.lock()) s->before_gradient(i); },
          [weak, i] { if (auto s = weak.lock()) s->after_gradient(i); }));
    if (s_->opts.async) seed_servers();
  }

  /// The same, with every parameter of `module`.
  DistributedOptimizer(Comm& comm, ::torch::optim::Optimizer& optimizer,
                       const ::torch::nn::Module& module, distributed_options options = {})
      : DistributedOptimizer(comm, optimizer, module.named_parameters(true), std::move(options)) {}

  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;
  DistributedOptimizer(DistributedOptimizer&&) noexcept = default;
  DistributedOptimizer& operator=(DistributedOptimizer&&) = delete;

  /// Removes the hooks and waits (within each operation's deadline) for what is in flight.
  ~DistributedOptimizer() {
    if (!s_) return;
    hooks_.clear();
    try {
      s_->wait_all();
    } catch (...) {  // the communicator failed: its handles said so already, or will
    }
  }

  /// Push_pulls every gradient not yet handed over (zeros for a parameter backward did not
  /// reach) and waits for all of them: each `.grad` then holds the workers' mean (or sum).
  /// Throws `communicator_error` when the cluster failed.
  void synchronize() {
    if (s_->opts.async) return;
    {
      std::lock_guard lock(s_->mu);
      for (std::size_t i = 0; i < s_->slots.size(); ++i) {
        slot& s = s_->slots[i];
        if (s.pending.valid()) continue;
        if (!s.param.grad().defined()) s.param.mutable_grad() = at::zeros_like(s.param);
        s_->launch(static_cast<int>(i));
      }
    }
    const auto start = clock::now();
    s_->wait_all();
    const auto waited = clock::now();
    times_.blocked_seconds = std::chrono::duration<double>(waited - start).count();
    const clock::rep last = s_->last_done->load();
    const clock::time_point done =
        last != 0 ? clock::time_point(clock::duration(last)) : waited;
    times_.exchange_seconds =
        s_->first_call ? std::chrono::duration<double>(std::max(done, waited) - *s_->first_call)
                             .count()
                       : 0.0;
    s_->first_call.reset();
    s_->last_done->store(0);
  }

  /// synchronize(), then the wrapped optimizer's step (async: the exchange of parameters).
  void step() {
    if (s_->opts.async) {
      async_step();
      return;
    }
    synchronize();
    optimizer_->step();
    std::lock_guard lock(s_->mu);
    for (auto& s : s_->slots) s.passes = 0;
  }

  /// The wrapped optimizer's zero_grad. Throws `usage_error` while an exchange is in flight.
  void zero_grad() {
    std::lock_guard lock(s_->mu);
    for (const auto& s : s_->slots)
      if (s.pending.valid())
        throw usage_error("bps::torch::DistributedOptimizer::zero_grad: the gradient of parameter '" +
                          s.name + "' is being exchanged; call step() or synchronize() first");
    optimizer_->zero_grad();
    for (auto& s : s_->slots) s.passes = 0;
  }

  /// The last synchronize()'s times.
  exchange_times last_exchange() const noexcept { return times_; }

  ::torch::optim::Optimizer& optimizer() const noexcept { return *optimizer_; }

 private:
  struct slot {
    std::string name;  // the parameter's, as the module names it
    std::string key;   // the tensor's name for byteps
    at::Tensor param;
    dtype type = dtype::float32;
    int priority = 0;
    int passes = 0;      // backward passes that reached it since the last step
    handle pending;      // its exchange, while in flight
    at::Tensor exchanged;  // the buffer being exchanged, kept alive until it is done
  };

  struct shared {
    std::mutex mu;
    std::vector<slot> slots;
    distributed_options opts;
    Comm* comm = nullptr;
    std::optional<clock::time_point> first_call;
    std::shared_ptr<std::atomic<clock::rep>> last_done =
        std::make_shared<std::atomic<clock::rep>>(0);

    // Before autograd adds into .grad: refuse while its exchange is in flight.
    void before_gradient(int i) {
      std::lock_guard lock(mu);
      const slot& s = slots[i];
      if (s.pending.valid())
        throw usage_error("bps::torch::DistributedOptimizer: parameter '" + s.name +
                          "' got another gradient while its push_pull is in flight; call step() "
                          "after every " + std::to_string(opts.backward_passes_per_step) +
                          " backward pass(es) (backward_passes_per_step)");
    }

    // Once .grad holds the accumulated gradient: exchange it on the last pass of the step.
    void after_gradient(int i) {
      std::lock_guard lock(mu);
      if (opts.async) return;
      slot& s = slots[i];
      if (++s.passes < opts.backward_passes_per_step) return;
      launch(i);
    }

    // Starts the exchange of slot i's gradient, in place. Called holding mu.
    void launch(int i) {
      slot& s = slots[i];
      at::Tensor g = s.param.grad();
      const dtype type =
          check_exchangeable(g, "the gradient of parameter '" + s.name + "'", home);
      if (g.numel() == 0) return;
      if (!first_call) first_call = clock::now();
      s.exchanged = g;
      s.pending = comm->push_pull(
          s.key, g.data_ptr(), static_cast<std::size_t>(g.numel()), type,
          push_pull_options{.priority = s.priority,
                            .average = opts.average,
                            .stream = opts.stream,
                            .compressor = opts.compressor});
      s.pending.when_done([last = last_done] {
        const clock::rep now = clock::now().time_since_epoch().count();
        clock::rep prev = last->load();
        while (prev < now && !last->compare_exchange_weak(prev, now)) {
        }
      });
    }

    // Waits for every exchange in flight, then forgets them; rethrows the first failure once
    // none is in flight any more (each buffer is then free).
    void wait_all() {
      std::vector<handle> hs;
      {
        std::lock_guard lock(mu);
        for (auto& s : slots)
          if (s.pending.valid()) hs.push_back(s.pending);
      }
      std::exception_ptr first;
      for (auto& h : hs) {
        try {
          h.wait();
        } catch (...) {
          if (!first) first = std::current_exception();
        }
      }
      std::lock_guard lock(mu);
      for (auto& s : slots) {
        s.pending = handle();
        s.exchanged = at::Tensor();
      }
      if (first) std::rethrow_exception(first);
    }
  };

  // Every tensor the optimizer updates must be exchanged, or the workers drift apart.
  void check_optimizer_covered(const std::unordered_set<const void*>& named) const {
    const auto& groups = optimizer_->param_groups();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto& ps = groups[g].params();
      for (std::size_t k = 0; k < ps.size(); ++k)
        if (ps[k].requires_grad() && !named.count(ps[k].unsafeGetTensorImpl()))
          throw usage_error(
              "bps::torch::DistributedOptimizer: the optimizer's parameter group " +
              std::to_string(g) + " holds a tensor (#" + std::to_string(k) + ", sizes " +
              detail::shape_text(ps[k].sizes()) +
              ") that is not among the named parameters given, so its gradient would not be "
              "exchanged and the workers would drift apart; pass the named_parameters() of the "
              "module the optimizer was built from");
    }
  }

  // Async: the first push_pull of each tensor gives every worker rank 0's values, which seed
  // the servers' parameters.
  void seed_servers() {
    ::torch::NoGradGuard no_grad;
    std::vector<at::Tensor> bufs;
    std::vector<handle> hs;
    for (auto& s : s_->slots) {
      bufs.push_back(s.param.detach().clone().contiguous());
      hs.push_back(exchange_buffer(s, bufs.back()));
    }
    for (auto& h : hs) h.wait();
    for (std::size_t i = 0; i < bufs.size(); ++i) s_->slots[i].param.detach().copy_(bufs[i]);
  }

  // Async: step locally, push each parameter's change, take the servers' parameters back.
  void async_step() {
    ::torch::NoGradGuard no_grad;
    std::vector<at::Tensor> bufs;
    for (auto& s : s_->slots) bufs.push_back(s.param.detach().clone().contiguous());
    optimizer_->step();
    std::vector<handle> hs;
    const auto start = clock::now();
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      bufs[i].neg_().add_(s_->slots[i].param.detach());  // the change: after - before
      hs.push_back(exchange_buffer(s_->slots[i], bufs[i]));
    }
    for (auto& h : hs) h.wait();
    for (std::size_t i = 0; i < bufs.size(); ++i) s_->slots[i].param.detach().copy_(bufs[i]);
    times_.blocked_seconds = times_.exchange_seconds =
        std::chrono::duration<double>(clock::now() - start).count();
  }

  handle exchange_buffer(const slot& s, at::Tensor& buf) {
    return comm_->push_pull(s.key, buf.data_ptr(), static_cast<std::size_t>(buf.numel()), s.type,
                            push_pull_options{.priority = s.priority, .stream = s_->opts.stream});
  }

  Comm* comm_;
  ::torch::optim::Optimizer* optimizer_;
  std::shared_ptr<shared> s_;
  std::vector<std::unique_ptr<accumulation_hooks>> hooks_;
  exchange_times times_;
};

}  // namespace bps::torch
