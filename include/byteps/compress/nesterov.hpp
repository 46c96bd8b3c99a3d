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

#include <fmt/core.h>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "byteps/compress/compressor.hpp"
#include "byteps/compress/elements.hpp"
#include "byteps/compress/fp32_decorator.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"

namespace bps::compress {

template <Compressor C>
class nesterov : public fp32_decorator<C> {
 public:
  nesterov(C inner, float mu)
      : fp32_decorator<C>(std::move(inner), "nesterov(", fmt::format(",mu={})", mu)), mu_(mu) {
    if (!(mu >= 0) || !std::isfinite(mu))
      throw usage_error(
          fmt::format("compressor 'nesterov': momentum mu must be finite and >= 0, got {}", mu));
  }

  float mu() const noexcept { return mu_; }
  /// The momentum m (empty before the first encode).
  std::span<const float> momentum() const noexcept { return momentum_; }

  void set_learning_rate(double lr) {
    if constexpr (takes_learning_rate<C>) this->inner_.set_learning_rate(lr);
  }

  std::size_t encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    const auto x =
        this->partition_floats(in, type, "a momentum compressor", {&momentum_, &update_});
    for (std::size_t i = 0; i < x.size(); ++i) {
      momentum_[i] = mu_ * momentum_[i] + x[i];
      update_[i] = x[i] + mu_ * momentum_[i];
    }
    return this->inner_.encode(float_bytes(update_), dtype::float32, out);
  }

 private:
  float mu_;
  std::vector<float> momentum_, update_;
};

}  // namespace bps::compress
