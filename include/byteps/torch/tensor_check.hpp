#pragma once
/// @file
/// `bps::torch::check_exchangeable`: whether byteps can exchange a tensor in place, and if not,
/// a `usage_error` that names the tensor, says what is wrong with it and what to do.
///
/// byteps reads and writes a tensor's storage directly (no copy): the tensor must be dense
/// (strided, not sparse), contiguous (one block of `numel()` elements), where the communicator
/// exchanges buffers (`buffers_of<Comm>`: on the CPU, or on a CUDA device for a communicator
/// whose local collective is `bps::local::nccl`), and of a type `to_dtype` maps.

#include <sstream>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/torch/dtype.hpp"

namespace bps {
template <class T, class L, class P, class S>
class Communicator;  // worker/communicator.hpp
namespace local {
class nccl;  // local/nccl.hpp: needs CUDA, which this header does not
}  // namespace local
}  // namespace bps

namespace bps::torch {

/// Where the buffers a communicator exchanges live.
enum class buffer_home { host, cuda };

/// `buffer_home::cuda` for a communicator whose local collective is `bps::local::nccl` (its
/// push_pull takes device buffers only), `host` for any other. A communicator of one's own that
/// takes device buffers specializes it.
template <class Comm>
inline constexpr buffer_home buffers_of = buffer_home::host;
template <class T, class P, class S>
inline constexpr buffer_home buffers_of<Communicator<T, local::nccl, P, S>> = buffer_home::cuda;

namespace detail {
inline std::string shape_text(c10::IntArrayRef v) {
  std::ostringstream s;
  s << v;  // "[3, 4]"
  return s.str();
}
}  // namespace detail

/// The device and the type of `t`, without looking at its layout: what a parameter must
/// satisfy when the optimizer is built (its gradient will have its device and type). `home`:
/// where the communicator's buffers live (`buffers_of<Comm>`).
inline dtype check_device_and_type(const at::Tensor& t, std::string_view what,
                                   buffer_home home = buffer_home::host) {
  if (home == buffer_home::host && !t.device().is_cpu())
    throw usage_error(std::string("bps::torch: ") + std::string(what) + " is on " +
                      t.device().str() +
                      ", not the CPU: this plugin exchanges CPU tensors only; move the module "
                      "to the CPU (module->to(torch::kCPU))");
  if (home == buffer_home::cuda && !t.device().is_cuda())
    throw usage_error(std::string("bps::torch: ") + std::string(what) + " is on " +
                      t.device().str() +
                      ", but this communicator (bps::local::nccl) exchanges CUDA device buffers; "
                      "move the module to this local rank's GPU "
                      "(module->to(torch::Device(torch::kCUDA, local_rank)))");
  return to_dtype(t.scalar_type(), what);
}

/// The byteps type of `t`, after checking that byteps can exchange it in place. `what` names
/// it in the error ("the gradient of parameter 'fc1.weight'").
inline dtype check_exchangeable(const at::Tensor& t, std::string_view what,
                                buffer_home home = buffer_home::host) {
  if (!t.defined())
    throw usage_error(std::string("bps::torch: ") + std::string(what) + " is undefined");
  if (t.is_sparse())
    throw usage_error(std::string("bps::torch: ") + std::string(what) +
                      " is sparse: byteps exchanges dense tensors; build the module with dense "
                      "gradients (e.g. torch::nn::EmbeddingOptions(...).sparse(false))");
  if (t.layout() != c10::kStrided)
    throw usage_error(std::string("bps::torch: ") + std::string(what) +
                      " is not a strided tensor: byteps exchanges dense tensors");
  const dtype type = check_device_and_type(t, what, home);
  if (!t.is_contiguous())
    throw usage_error(std::string("bps::torch: ") + std::string(what) +
                      " is not contiguous (sizes " + detail::shape_text(t.sizes()) +
                      ", strides " + detail::shape_text(t.strides()) +
                      "): byteps exchanges it in place, as one block; register the parameter "
                      "as a contiguous tensor (tensor.contiguous())");
  return type;
}

}  // namespace bps::torch
