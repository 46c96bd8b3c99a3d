#pragma once
/// @file
/// `server::key_shape`: a partition key's shape as the first push (or offer) of any worker fixed
/// it: dtype, the whole tensor's size, the partition's offset and size, and who pushed first.
/// The two kinds of key, sync_sum's `key_state` and async_sum's `async_key`, are each a
/// key_shape, and check a frame and name a mismatch through it, so both say the same things.

#include <fmt/core.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "byteps/core/dtype.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::server {

struct key_shape {
  bool shaped = false;  ///< a first push or offer fixed what follows
  dtype type = dtype::float32;
  std::uint64_t tensor_bytes = 0;  ///< the whole tensor's
  std::uint64_t offset = 0;        ///< the partition's, in its tensor
  std::uint64_t bytes = 0;         ///< the partition's
  int first_worker = -1;           ///< who fixed it

  std::size_t count() const noexcept { return bytes / dtype_size(type); }

  /// What is wrong with a frame of `size` payload bytes and dtype `t` from `worker` whatever
  /// the key's shape (an unknown dtype, part of an element, an unknown worker); "" if nothing.
  /// `tensor_name()` names the tensor, called only for a message.
  template <class NameFn>
  static std::string check_frame(const wire::header& h, std::size_t size,
                                 const std::optional<dtype>& t, int worker, int num_workers,
                                 NameFn&& tensor_name) {
    if (!t) return fmt::format("unknown dtype value {} for {}", h.dtype, tensor_name());
    if (size % dtype_size(*t) != 0)
      return fmt::format("a partition of {} has {} bytes, not a whole number of {} elements",
                         tensor_name(), size, dtype_name(*t));
    if (worker < 0 || worker >= num_workers)
      return fmt::format("push from unknown worker {}", worker);
    return {};
  }

  /// Fixes the shape from `worker`'s frame `h` of `size` bytes of `t`.
  void capture(const wire::header& h, dtype t, std::size_t size, int worker) {
    shaped = true;
    type = t;
    tensor_bytes = h.tensor_bytes;
    offset = h.offset;
    bytes = size;
    first_worker = worker;
  }

  bool same(const wire::header& h, dtype t, std::size_t size) const noexcept {
    return t == type && h.tensor_bytes == tensor_bytes && h.offset == offset && size == bytes;
  }

  /// The error for `worker`'s frame `h` of dtype `t`, whose shape is not this one.
  std::string mismatch(const std::string& tensor, int worker, const wire::header& h,
                       dtype t) const {
    return fmt::format(
        "tensor {} has different shapes on different workers: worker {} pushed {} x {}, "
        "worker {} pushed {} x {}; every worker must push_pull the same number of elements "
        "and dtype under one name",
        tensor, first_worker, tensor_bytes / dtype_size(type), dtype_name(type), worker,
        h.tensor_bytes / dtype_size(t), dtype_name(t));
  }
};

}  // namespace bps::server
