#pragma once
/// @file
/// `nesterov<C>`: Nesterov momentum applied before compressor C (BytePS's `nesterov`
/// `momentum_type`, with `momentum_mu`), for algorithms such as dist-EF-SGDM that need the
/// momentum before compression. The trainer's own momentum should then be off (mu = 0 there).
/// Workers only: BytePS applies no momentum on servers (registry.hpp's `for_server`).
///
/// Each encode, in fp32 (elements.hpp), with m the momentum (zeros at first):
///   m = mu * m + x
///   p = x + mu * m
///   stream = C.encode(p)       (C sees a float32 tensor of the same element count)
/// Decode is C's, as float32, written back in the tensor's dtype; the encoded format is C's for
/// a float32 tensor. `set_learning_rate` goes to C if it takes one (nesterov<error_feedback<..>>).
/// A compressor object belongs to one partition: another element count is a `usage_error`.

#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/compress/compressor.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"

namespace bps::compress {

template <Compressor C>
class nesterov {
 public:
  nesterov(C inner, float mu) : inner_(std::move(inner)), mu_(mu) {
    if (!(mu >= 0) || !std::isfinite(mu))
      throw usage_error(
          fmt::format("compressor 'nesterov': momentum mu must be finite and >= 0, got {}", mu));
    name_ = fmt::format("nesterov({},mu={})", inner_.name(), mu);
  }

  std::string name() const { return name_; }
  const C& inner() const noexcept { return inner_; }
  float mu() const noexcept { return mu_; }
  /// The momentum m (empty before the first encode).
  std::span<const float> momentum() const noexcept { return momentum_; }

  void set_learning_rate(double lr) {
    if constexpr (takes_learning_rate<C>) inner_.set_learning_rate(lr);
  }

  std::size_t max_encoded_bytes(std::size_t bytes, dtype type) const {
    return inner_.max_encoded_bytes(float_elements(name_, bytes, type) * 4, dtype::float32);
  }

  std::size_t encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    const std::size_t n = float_elements(name_, in.size(), type);
    const auto x = read_floats(in, type, scratch_);
    if (momentum_.size() != n) {
      if (started_)
        throw usage_error(fmt::format(
            "compressor '{}': encoding {} elements after {}; a momentum compressor belongs to "
            "one partition",
            name_, n, momentum_.size()));
      momentum_.assign(n, 0.0f);
      update_.resize(n);
    }
    started_ = true;
    for (std::size_t i = 0; i < n; ++i) {
      momentum_[i] = mu_ * momentum_[i] + x[i];
      update_[i] = x[i] + mu_ * momentum_[i];
    }
    return inner_.encode(float_bytes(update_), dtype::float32, out);
  }

  void decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    float_elements(name_, out.size(), type);
    const auto y = float_target(out, type, scratch_);
    inner_.decode(in, dtype::float32, std::as_writable_bytes(y));
    write_floats(y, type, out);
  }

 private:
  C inner_;
  float mu_;
  std::string name_;
  std::vector<float> momentum_, update_;
  std::vector<float> scratch_;  // non-float32 or unaligned tensors only
  bool started_ = false;
};

}  // namespace bps::compress
