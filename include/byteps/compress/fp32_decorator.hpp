#pragma once
/// @file
/// `fp32_decorator<C>`: what the decorators that change a partition's fp32 values before
/// compressor C share (error_feedback.hpp, nesterov.hpp). C is handed a float32 tensor of the
/// partition's element count, so the encoded format and bound are C's for float32, and decode is
/// C's, as float32, written back in the tensor's dtype. The decorator's per-element state (an
/// error, a momentum) is sized by the first encode; one object belongs to one partition, so an
/// encode of another element count is a `usage_error`.

#include <fmt/core.h>

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "byteps/compress/compressor.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"

namespace bps::compress {

template <Compressor C>
class fp32_decorator {
 public:
  std::string name() const { return name_; }
  const C& inner() const noexcept { return inner_; }

  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const {
    return inner_.max_encoded_bytes(float_elements(name_, bytes, type) * 4, dtype::float32);
  }

  void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    decode_as_floats(name_, out, type, scratch_, [&](std::span<float> y) {
      inner_.decode(in, dtype::float32, std::as_writable_bytes(y));
    });
  }

 protected:
  /// Named `prefix` + C's name + `suffix`.
  fp32_decorator(C inner, std::string_view prefix, std::string_view suffix)
      : inner_(std::move(inner)),
        name_(std::string(prefix) + inner_.name() + std::string(suffix)) {}

  /// The elements of `in` as fp32. The first call sizes each of `state` to them, zeros; a later
  /// call with another count throws, saying that `what` (e.g. "an error feedback compressor")
  /// belongs to one partition.
  std::span<const float> partition_floats(std::span<const std::byte> in, dtype type,
                                          std::string_view what,
                                          std::initializer_list<std::vector<float>*> state) {
    const std::size_t n = float_elements(name_, in.size(), type);
    if (!started_) {
      for (auto* v : state) v->assign(n, 0.0f);
      elements_ = n;
      started_ = true;
    } else if (n != elements_) {
      throw usage_error(fmt::format(
          "compressor '{}': encoding {} elements after {}; {} belongs to one partition", name_, n,
          elements_, what));
    }
    return read_floats(in, type, scratch_);
  }

  C inner_;  // before name_, which is made from its name

 private:
  std::string name_;
  std::vector<float> scratch_;  // non-float32 or unaligned tensors only
  std::size_t elements_ = 0;
  bool started_ = false;
};

}  // namespace bps::compress
