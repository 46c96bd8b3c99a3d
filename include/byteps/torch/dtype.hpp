#pragma once
/// @file
/// `bps::torch::to_dtype`: the `bps::dtype` that carries a libtorch scalar type, so that a
/// tensor's storage goes to `push_pull` and `broadcast` as it is, with no conversion.
///
/// float32, float64, float16 (`at::kHalf`) and bfloat16 (`at::kBFloat16`) map to byteps'
/// floating types (fp16 and bf16 are summed in fp32 on the servers); int8, uint8, int32 and
/// int64 to its integer types (buffers such as BatchNorm's `num_batches_tracked`). Every other
/// type (bool, int16, complex, the quantized ones) has no byteps counterpart.

#include <optional>
#include <string>
#include <string_view>

#include <c10/core/ScalarType.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"

namespace bps::torch {

/// The byteps type of `t`, or nullopt when byteps cannot carry it.
constexpr std::optional<dtype> to_dtype(c10::ScalarType t) noexcept {
  switch (t) {
    case c10::ScalarType::Float: return dtype::float32;
    case c10::ScalarType::Double: return dtype::float64;
    case c10::ScalarType::Half: return dtype::float16;
    case c10::ScalarType::BFloat16: return dtype::bfloat16;
    case c10::ScalarType::Char: return dtype::int8;
    case c10::ScalarType::Byte: return dtype::uint8;
    case c10::ScalarType::Int: return dtype::int32;
    case c10::ScalarType::Long: return dtype::int64;
    default: return std::nullopt;
  }
}

/// The byteps type of `t`; throws `usage_error` naming `what` (e.g. "parameter 'fc1.weight'")
/// when byteps cannot carry it.
inline dtype to_dtype(c10::ScalarType t, std::string_view what) {
  if (auto d = to_dtype(t)) return *d;
  throw usage_error(std::string("bps::torch: ") + std::string(what) + " has dtype " +
                    c10::toString(t) +
                    ", which byteps cannot carry: use float32, float64, float16 or bfloat16 "
                    "(or int8, uint8, int32, int64 for buffers)");
}

}  // namespace bps::torch
