// The libtorch plugin (include/byteps/torch/) against a recording communicator (fake_comm.hpp):
// what it asks of push_pull and when, each refusal's exact message, accumulation, broadcasts,
// and the async step. The plugin on a real cluster: torch_job.sh (2 workers x 2 servers).
#include <byteps/compress/registry.hpp>
#include <byteps/torch.hpp>

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstring>
#include <string>
#include <vector>

#include "fake_comm.hpp"

namespace bps::test {
// fake_comm as a communicator of CUDA buffers (as with bps::local::nccl) sees it.
struct fake_cuda_comm : fake_comm {
  using fake_comm::fake_comm;
};
}  // namespace bps::test

namespace bps::torch {
template <>
inline constexpr buffer_home buffers_of<test::fake_cuda_comm> = buffer_home::cuda;
}  // namespace bps::torch

// Which communicators take CUDA buffers: known from the type alone, without CUDA's headers
// (the types are only named, never defined, here).
struct some_policy;
static_assert(bps::torch::buffers_of<bps::Communicator<some_policy, bps::local::nccl, some_policy,
                                                       some_policy>> ==
              bps::torch::buffer_home::cuda);
static_assert(bps::torch::buffers_of<
                  bps::Communicator<some_policy, some_policy, some_policy, some_policy>> ==
              bps::torch::buffer_home::host);
static_assert(bps::torch::DistributedOptimizer<bps::test::fake_cuda_comm>::home ==
              bps::torch::buffer_home::cuda);

namespace {

using bps::test::fake_comm;
using bps::test::fake_cuda_comm;
using bps::torch::DistributedOptimizer;

// The message of the bps::usage_error that f throws, or what happened instead.
template <class F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const bps::usage_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("another exception: ") + e.what();
  }
  return "no exception";
}

// A module with one parameter of the given tensor, named "w".
struct OneImpl : torch::nn::Module {
  explicit OneImpl(const torch::Tensor& t) { w = register_parameter("w", t); }
  torch::Tensor w;
};
TORCH_MODULE(One);

// Two layers: "first" (4 -> 3) and "second" (3 -> 2).
struct TwoImpl : torch::nn::Module {
  TwoImpl() : first(4, 3), second(3, 2) {
    register_module("first", first);
    register_module("second", second);
  }
  torch::Tensor forward(const torch::Tensor& x) { return second(torch::relu(first(x))); }
  torch::nn::Linear first, second;
};
TORCH_MODULE(Two);

}  // namespace

TEST_CASE("float32, float64, float16 and bfloat16 map to bps::dtype, complex and bool do not") {
  using bps::torch::to_dtype;
  CHECK(to_dtype(torch::kFloat32) == bps::dtype::float32);
  CHECK(to_dtype(torch::kFloat64) == bps::dtype::float64);
  CHECK(to_dtype(torch::kFloat16) == bps::dtype::float16);
  CHECK(to_dtype(torch::kBFloat16) == bps::dtype::bfloat16);
  CHECK(to_dtype(torch::kInt64) == bps::dtype::int64);
  CHECK_FALSE(to_dtype(torch::kComplexFloat).has_value());
  CHECK_FALSE(to_dtype(torch::kBool).has_value());
  CHECK(usage_error_of([] { to_dtype(torch::kBool, "buffer 'mask'"); }) ==
        "bps::torch: buffer 'mask' has dtype Bool, which byteps cannot carry: use float32, "
        "float64, float16 or bfloat16 (or int8, uint8, int32, int64 for buffers)");
}

TEST_CASE("each floating dtype's gradient is push_pulled with its bps::dtype") {
  for (auto [st, dt] : {std::pair{torch::kFloat32, bps::dtype::float32},
                        std::pair{torch::kFloat64, bps::dtype::float64},
                        std::pair{torch::kFloat16, bps::dtype::float16},
                        std::pair{torch::kBFloat16, bps::dtype::bfloat16}}) {
    One m(torch::ones({5}, torch::TensorOptions().dtype(st).requires_grad(true)));
    torch::optim::SGD sgd(m->parameters(), 0.1);
    fake_comm comm;
    comm.finish_at_once = true;
    DistributedOptimizer opt(comm, sgd, *m);
    (m->w.to(torch::kFloat32) * 2).sum().backward();
    REQUIRE(comm.calls.size() == 1);
    CHECK(comm.calls[0].type == dt);
    CHECK(comm.calls[0].count == 5);
    opt.step();
  }
}

TEST_CASE("a parameter that is not on the CPU is refused when the optimizer is built") {
  One m(torch::zeros({2, 2}, torch::TensorOptions().device(torch::kMeta).requires_grad(true)));
  torch::optim::SGD sgd(m->parameters(), 0.1);
  fake_comm comm;
  CHECK(usage_error_of([&] { DistributedOptimizer opt(comm, sgd, *m); }) ==
        "bps::torch: parameter 'w' is on meta, not the CPU: this plugin exchanges CPU tensors "
        "only; move the module to the CPU (module->to(torch::kCPU))");
}

TEST_CASE("with a communicator of CUDA buffers (bps::local::nccl) a CPU parameter is refused "
          "when the optimizer is built, and by the broadcasts, naming it") {
  One m(torch::zeros({2, 2}, torch::TensorOptions().requires_grad(true)));
  torch::optim::SGD sgd(m->parameters(), 0.1);
  fake_cuda_comm comm;
  const std::string after =
      " is on cpu, but this communicator (bps::local::nccl) exchanges CUDA device buffers; move "
      "the module to this local rank's GPU (module->to(torch::Device(torch::kCUDA, local_rank)))";
  CHECK(usage_error_of([&] { DistributedOptimizer opt(comm, sgd, *m); }) ==
        "bps::torch: parameter 'w'" + after);
  CHECK(usage_error_of([&] { bps::torch::broadcast_parameters(comm, *m, 0); }) ==
        "bps::torch: tensor 'w'" + after);
  CHECK(usage_error_of([&] { bps::torch::broadcast_optimizer_state(comm, sgd, 0); }) ==
        "bps::torch::broadcast_optimizer_state: the optimizer has no parameter on a CUDA device, "
        "and this communicator (bps::local::nccl) exchanges CUDA device buffers only; build the "
        "optimizer from the module once it is on the GPU");
  CHECK(comm.calls.empty());
}

TEST_CASE("a complex parameter is refused when the optimizer is built") {
  One m(torch::zeros({2}, torch::TensorOptions().dtype(torch::kComplexFloat).requires_grad(true)));
  torch::optim::SGD sgd(m->parameters(), 0.1);
  fake_comm comm;
  CHECK(usage_error_of([&] { DistributedOptimizer opt(comm, sgd, *m); }) ==
        "bps::torch: parameter 'w' has dtype ComplexFloat, which byteps cannot carry: use "
        "float32, float64, float16 or bfloat16 (or int8, uint8, int32, int64 for buffers)");
}

TEST_CASE("a sparse gradient is refused from backward(), naming the parameter") {
  torch::nn::Embedding embed(torch::nn::EmbeddingOptions(10, 3).sparse(true));
  torch::optim::SGD sgd(embed->parameters(), 0.1);
  fake_comm comm;
  DistributedOptimizer opt(comm, sgd, *embed);
  CHECK(usage_error_of([&] { embed(torch::tensor({1, 2})).sum().backward(); }) ==
        "bps::torch: the gradient of parameter 'weight' is sparse: byteps exchanges dense "
        "tensors; build the module with dense gradients (e.g. "
        "torch::nn::EmbeddingOptions(...).sparse(false))");
  CHECK(comm.calls.empty());
}

TEST_CASE("a non-contiguous gradient is refused from backward(), naming the parameter") {
  One m(torch::ones({3, 4}).t().requires_grad_(true));  // sizes [4, 3], strides [1, 4]
  torch::optim::SGD sgd(m->parameters(), 0.1);
  fake_comm comm;
  DistributedOptimizer opt(comm, sgd, *m);
  CHECK(usage_error_of([&] { (m->w * 2).sum().backward(); }) ==
        "bps::torch: the gradient of parameter 'w' is not contiguous (sizes [4, 3], strides "
        "[1, 4]): byteps exchanges it in place, as one block; register the parameter as a "
        "contiguous tensor (tensor.contiguous())");
  CHECK(comm.calls.empty());
}

TEST_CASE("another gradient while the exchange is in flight is refused before it touches the buffer") {
  One m(torch::ones({4}).requires_grad_(true));
  torch::optim::SGD sgd(m->parameters(), 0.1);
  fake_comm comm;
  DistributedOptimizer opt(comm, sgd, *m);
  (m->w * 2).sum().backward();
  REQUIRE(comm.calls.size() == 1);
  CHECK(usage_error_of([&] { (m->w * 5).sum().backward(); }) ==
        "bps::torch::DistributedOptimizer: parameter 'w' got another gradient while its "
        "push_pull is in flight; call step() after every 1 backward pass(es) "
        "(backward_passes_per_step)");
  CHECK(torch::equal(m->w.grad(), torch::full({4}, 2.0f)));  // untouched: 2, not 2 + 5
  CHECK(comm.calls.size() == 1);
  CHECK(usage_error_of([&] { opt.zero_grad(); }) ==
        "bps::torch::DistributedOptimizer::zero_grad: the gradient of parameter 'w' is being "
        "exchanged; call step() or synchronize() first");
  comm.finish_all();
  opt.step();
  CHECK(torch::allclose(m->w, torch::full({4}, 0.8f)));  // 1 - 0.1 x 2
}

TEST_CASE("misuse when the optimizer is built: no passes, a parameter the names lack") {
  Two m;
  fake_comm comm;
  torch::optim::SGD sgd(m->parameters(), 0.1);
  CHECK(usage_error_of([&] {
          DistributedOptimizer opt(comm, sgd, *m, {.backward_passes_per_step = 0});
        }) == "bps::torch::DistributedOptimizer: backward_passes_per_step is 0; it must be >= 1");
  CHECK(usage_error_of([&] { DistributedOptimizer opt(comm, sgd, *m->second); }) ==
        "bps::torch::DistributedOptimizer: the optimizer's parameter group 0 holds a tensor "
        "(#0, sizes [3, 4]) that is not among the named parameters given, so its gradient "
        "would not be exchanged and the workers would drift apart; pass the "
        "named_parameters() of the module the optimizer was built from");
}

TEST_CASE("each gradient is push_pulled in place during backward, last layer first, first layer at the highest priority") {
  Two m;
  torch::optim::SGD sgd(m->parameters(), 0.1);
  fake_comm comm;
  DistributedOptimizer opt(comm, sgd, *m);
  m(torch::ones({2, 4})).sum().backward();
  // All four were handed over by backward itself, before step().
  REQUIRE(comm.calls.size() == 4);
  CHECK(comm.calls[0].name.rfind("grad.second.", 0) == 0);
  CHECK(comm.calls[3].name.rfind("grad.first.", 0) == 0);
  const auto named = m->named_parameters();
  for (const auto& c : comm.calls) {
    const std::string param = c.name.substr(5);  // after "grad."
    CHECK(c.data == named[param].grad().data_ptr());  // the .grad tensor itself: no copy
    CHECK(c.opts.average);
    const int expected = param == "first.weight" ? 4 : param == "first.bias" ? 3
                       : param == "second.weight" ? 2 : 1;
    CHECK(c.opts.priority == expected);
  }
  comm.finish_all();
  opt.step();
}

TEST_CASE("backward_passes_per_step 2 exchanges once per step, the sum of both passes") {
  One m(torch::ones({3}).requires_grad_(true));
  torch::optim::SGD sgd(m->parameters(), 1.0);
  fake_comm comm;
  comm.finish_at_once = true;
  DistributedOptimizer opt(comm, sgd, *m, {.backward_passes_per_step = 2});
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    (m->w * 2).sum().backward();
    CHECK(comm.calls.size() == static_cast<std::size_t>(step));  // not yet
    (m->w * 3).sum().backward();
    CHECK(comm.calls.size() == static_cast<std::size_t>(step + 1));
    CHECK(static_cast<float*>(comm.calls.back().data)[0] == 5.0f);
    opt.step();
  }
  CHECK(torch::equal(m->w, torch::full({3}, -9.0f)));  // 1 - 5 - 5
}

TEST_CASE("step() exchanges a parameter backward did not reach, as zeros") {
  Two m;
  torch::optim::SGD both(m->parameters(), 0.1);
  fake_comm comm;
  comm.finish_at_once = true;
  DistributedOptimizer opt(comm, both, *m);
  m->first(torch::ones({1, 4})).sum().backward();  // "second" unused
  CHECK(comm.calls.size() == 2);
  opt.step();
  REQUIRE(comm.calls.size() == 4);
  CHECK(torch::equal(m->second->weight.grad(), torch::zeros({2, 3})));
}

TEST_CASE("broadcast_parameters and broadcast_optimizer_state give rank 1 rank 0's values") {
  fake_comm::store shared;
  fake_comm root(0, &shared), other(1, &shared);
  torch::manual_seed(1);
  Two m0;
  torch::manual_seed(2);
  Two m1;
  REQUIRE_FALSE(torch::equal(m0->first->weight, m1->first->weight));
  torch::optim::SGD s0(m0->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD s1(m1->parameters(), torch::optim::SGDOptions(0.7).momentum(0.9));
  m0(torch::ones({1, 4})).sum().backward();
  s0.step();  // rank 0 has momentum buffers, rank 1 none
  bps::torch::broadcast_parameters(root, *m0, 0);
  bps::torch::broadcast_parameters(other, *m1, 0);
  bps::torch::broadcast_optimizer_state(root, s0, 0);
  bps::torch::broadcast_optimizer_state(other, s1, 0);
  const auto p0 = m0->parameters(), p1 = m1->parameters();
  for (std::size_t i = 0; i < p0.size(); ++i) CHECK(torch::equal(p0[i], p1[i]));
  CHECK(s1.param_groups()[0].options().get_lr() == 0.1);
  const auto& st0 = static_cast<torch::optim::SGDParamState&>(
      *s0.state().at(c10::guts::to_string(p0[0].unsafeGetTensorImpl())));
  const auto& st1 = static_cast<torch::optim::SGDParamState&>(
      *s1.state().at(c10::guts::to_string(p1[0].unsafeGetTensorImpl())));
  CHECK(torch::equal(st0.momentum_buffer(), st1.momentum_buffer()));
}

TEST_CASE("async step pushes each parameter's change and takes the servers' values") {
  One m(torch::full({2}, 1.0f).requires_grad_(true));
  torch::optim::SGD sgd(m->parameters(), 0.5);
  fake_comm comm;
  comm.finish_at_once = true;
  comm.async_server = true;
  DistributedOptimizer opt(comm, sgd, *m, {.async = true});
  REQUIRE(comm.calls.size() == 1);  // the seed: the servers start from these values
  CHECK(comm.server_params.at("grad.w") == std::vector<float>{1, 1});
  comm.server_params.at("grad.w") = {10, 20};  // another worker's updates meanwhile
  (m->w * 2).sum().backward();
  CHECK(comm.calls.size() == 1);  // gradients stay local
  opt.step();  // locally 1 - 0.5 x 2 = 0: the change -1 goes to the servers
  REQUIRE(comm.calls.size() == 2);
  CHECK(torch::equal(m->w, torch::tensor({9.0f, 19.0f})));  // the servers' 10 - 1, 20 - 1
}

TEST_CASE("a compressor and average = false reach every push_pull as given") {
  Two m;
  torch::optim::SGD sgd(m->parameters(), 0.1);
  fake_comm comm;
  comm.finish_at_once = true;
  const auto codec = bps::compress::by_name("fp16");
  DistributedOptimizer opt(comm, sgd, *m, {.average = false, .compressor = codec});
  m(torch::ones({2, 4})).sum().backward();
  REQUIRE(comm.calls.size() == 4);
  for (const auto& c : comm.calls) {
    CHECK(c.opts.compressor == codec);
    CHECK_FALSE(c.opts.average);
  }
  opt.step();
  CHECK(usage_error_of([&] {
          DistributedOptimizer bad(comm, sgd, *m, {.compressor = codec, .async = true});
        }) == "bps::torch::DistributedOptimizer: async and a compressor: async servers add "
              "pushes as they come and do not decode compressed ones; choose one");
}
