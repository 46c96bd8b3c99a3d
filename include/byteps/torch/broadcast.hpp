#pragma once
/// @file
/// `bps::torch::broadcast_parameters` and `bps::torch::broadcast_optimizer_state`: every
/// worker starts from the root's model and optimizer, as BytePS's plugins do before training
/// (also after loading a checkpoint on the root only).
///
/// Both block until done (each operation within its deadline, `BYTEPS_OP_TIMEOUT_MS`) and must
/// be called by every worker, with the same module structure and optimizer type. Tensors are
/// named `prefix` + their name in the module, so the same call on every worker meets.

#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/torch/tensor_check.hpp"

namespace bps::torch {

namespace detail {
inline std::string group_options_key(std::size_t group) {
  return "bps_param_group_options_" + std::to_string(group);
}

// Broadcasts `count` elements of `type` at `host` from `root`, in place; through a copy on
// `device` where the communicator takes CUDA buffers only.
template <class Comm>
void broadcast_host(Comm& comm, const std::string& name, void* host, std::size_t count,
                    dtype type, int root, const at::Device& device) {
  if constexpr (buffers_of<Comm> == buffer_home::cuda) {
    const at::Tensor on_host = at::from_blob(
        host, {static_cast<std::int64_t>(count * dtype_size(type))}, at::kByte);
    at::Tensor on_device = on_host.to(device);
    comm.broadcast(name, on_device.data_ptr(), count, type, root).wait();
    on_host.copy_(on_device);
  } else {
    (void)device;
    comm.broadcast(name, host, count, type, root).wait();
  }
}

// Where the optimizer's bytes are staged for a communicator of CUDA buffers: the device of
// its first parameter.
inline at::Device staging_device(::torch::optim::Optimizer& optimizer, buffer_home home) {
  if (home == buffer_home::host) return at::Device(at::kCPU);
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      if (p.device().is_cuda()) return p.device();
  throw usage_error("bps::torch::broadcast_optimizer_state: the optimizer has no parameter on a "
                    "CUDA device, and this communicator (bps::local::nccl) exchanges CUDA device "
                    "buffers only; build the optimizer from the module once it is on the GPU");
}
}  // namespace detail

/// Copies the root's values of `tensors` into every worker's, in place (a tensor that is not
/// contiguous goes through a contiguous copy). Tensors where the communicator exchanges
/// buffers (`buffers_of<Comm>`: the CPU, or a CUDA device with `bps::local::nccl`) of a type
/// `to_dtype` maps; anything else is refused with `usage_error` naming it.
template <class Comm>
void broadcast_tensors(Comm& comm, const ::torch::OrderedDict<std::string, at::Tensor>& tensors,
                       int root, const std::string& prefix) {
  ::torch::NoGradGuard no_grad;
  struct item {
    at::Tensor target, buffer;
    handle h;
  };
  std::vector<item> items;
  for (const auto& kv : tensors) {
    const at::Tensor t = kv.value().detach();
    const dtype type = check_device_and_type(t, "tensor '" + kv.key() + "'", buffers_of<Comm>);
    if (t.numel() == 0) continue;
    item it{t, t.is_contiguous() ? t : t.contiguous(), {}};
    it.h = comm.broadcast(prefix + kv.key(), it.buffer.data_ptr(),
                          static_cast<std::size_t>(it.buffer.numel()), type, root);
    items.push_back(std::move(it));
  }
  for (auto& it : items) it.h.wait();
  for (auto& it : items)
    if (!it.buffer.is_same(it.target)) it.target.copy_(it.buffer);
}

/// Every parameter and buffer of `module` (recursively) from `root` to every worker.
template <class Comm>
void broadcast_parameters(Comm& comm, const ::torch::nn::Module& module, int root,
                          const std::string& prefix = "broadcast.") {
  broadcast_tensors(comm, module.named_parameters(true), root, prefix);
  broadcast_tensors(comm, module.named_buffers(true), root, prefix);
}

/// The root's optimizer state (its per-parameter state, such as momentum buffers or Adam's
/// moments and step counts, and every parameter group's options, such as the learning rate)
/// into every worker's optimizer. The state is the optimizer's own serialization
/// (`Optimizer::save`), whose per-parameter entries `Optimizer::load` matches by position in
/// the parameter groups, so the optimizers must have been built the same way on every worker.
/// libtorch 1.13's `load` leaves the groups' options as they were, so each group's options go
/// in the same archive (`OptimizerOptions::serialize`) and are read back into the group.
/// Two broadcasts: the size, then the bytes (under a name that holds the size).
template <class Comm>
void broadcast_optimizer_state(Comm& comm, ::torch::optim::Optimizer& optimizer, int root,
                               const std::string& name = "broadcast.optimizer_state") {
  const at::Device device = detail::staging_device(optimizer, buffers_of<Comm>);
  std::string bytes;
  if (comm.rank() == root) {
    ::torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    const auto& groups = optimizer.param_groups();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      ::torch::serialize::OutputArchive options;
      groups[g].options().serialize(options);
      archive.write(detail::group_options_key(g), options);
    }
    std::ostringstream out;
    archive.save_to(out);
    bytes = std::move(out).str();
  }
  std::int64_t size = static_cast<std::int64_t>(bytes.size());
  detail::broadcast_host(comm, name + ".size", &size, 1, dtype::int64, root, device);
  std::vector<std::uint8_t> data(static_cast<std::size_t>(size));
  if (comm.rank() == root) data.assign(bytes.begin(), bytes.end());
  detail::broadcast_host(comm, name + "." + std::to_string(size), data.data(), data.size(),
                         dtype::uint8, root, device);
  if (comm.rank() == root) return;
  ::torch::serialize::InputArchive archive;
  archive.load_from(reinterpret_cast<const char*>(data.data()), data.size());
  optimizer.load(archive);
  auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ::torch::serialize::InputArchive options;
    archive.read(detail::group_options_key(g), options);
    groups[g].options().serialize(options);
  }
}

}  // namespace bps::torch
