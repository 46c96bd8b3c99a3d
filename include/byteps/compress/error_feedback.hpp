#pragma once
/// @file
/// `error_feedback<C>`: a decorator that keeps what compressor C failed to send and adds it to
/// the next round's input (BytePS's `vanilla` error feedback, `ef_type`). The library owns the
/// error buffer: one per compressor object, so one per partition on a worker and one per key
/// on a server that re-encodes its sums.
///
/// Each encode, in fp32 (elements.hpp), with e the kept error (zeros at first):
///   c = x + ratio * e          (ratio: the learning-rate ratio below)
///   stream = C.encode(c)       (C sees a float32 tensor of the same element count)
///   e = c - C.decode(stream)   (each element rounded once to fp32)
/// so what is sent plus what is kept is c: exactly when C sends elements as they are or not at
/// all (topk, randomk), else up to that one rounding of e. Decode is C's, also as float32,
/// written back in the tensor's dtype. The encoded format is C's for a float32 tensor.
///
/// The learning-rate ratio: the kept error was scaled by the learning rate it was computed
/// under, so when the rate changes BytePS multiplies it by previous / current. Set the rate with
/// `set_learning_rate(lr)`; the communicator forwards `comm.set_learning_rate(lr)` to every
/// compressor that takes it (compressor.hpp's `takes_learning_rate`). The ratio is the rate at
/// the previous encode over the rate now, and 1 until a rate has been set for two encodes.
///
/// A compressor object belongs to one partition: an encode of another element count than the
/// first is a `usage_error`.

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
class error_feedback : public fp32_decorator<C> {
 public:
  explicit error_feedback(C inner) : fp32_decorator<C>(std::move(inner), "ef(", ")") {}

  /// The error kept for the next round (empty before the first encode).
  std::span<const float> error() const noexcept { return error_; }

  void set_learning_rate(double lr) {
    if (!(lr > 0) || !std::isfinite(lr))
      throw usage_error(fmt::format(
          "compressor '{}': the learning rate must be positive and finite, got {}", this->name(),
          lr));
    lr_ = lr;
    if constexpr (takes_learning_rate<C>) this->inner_.set_learning_rate(lr);
  }

  std::size_t encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
    const auto x = this->partition_floats(in, type, "an error feedback compressor",
                                          {&error_, &corrected_, &decoded_});
    const float ratio =
        lr_at_last_encode_ > 0 && lr_ > 0 ? static_cast<float>(lr_at_last_encode_ / lr_) : 1.0f;
    lr_at_last_encode_ = lr_;
    for (std::size_t i = 0; i < x.size(); ++i) corrected_[i] = x[i] + ratio * error_[i];
    const std::size_t size = this->inner_.encode(float_bytes(corrected_), dtype::float32, out);
    this->inner_.decode(out.first(size), dtype::float32,
                        std::as_writable_bytes(std::span(decoded_)));
    for (std::size_t i = 0; i < x.size(); ++i) error_[i] = corrected_[i] - decoded_[i];
    return size;
  }

 private:
  std::vector<float> error_, corrected_, decoded_;
  double lr_ = 0;                 // 0: never set
  double lr_at_last_encode_ = 0;  // 0: no encode under a set rate yet
};

}  // namespace bps::compress
