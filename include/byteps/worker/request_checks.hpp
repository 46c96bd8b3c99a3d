#pragma once
/// @file
/// The argument checks every push_pull and broadcast passes before anything is queued, so that
/// misuse is a `usage_error` naming the tensor, raised in the caller's thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/core.h>

#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/push_pull_options.hpp"

namespace bps::worker {

inline void check_name(const char* op, std::string_view name) {
  if (name.empty())
    throw usage_error(
        fmt::format("{}: the tensor name is empty; give every tensor a unique, "
                    "non-empty name",
                    op));
}

inline void check_request(const std::string& what, const void* data, std::size_t count, dtype type,
                          const push_pull_options& opts) {
  if (!dtype_from_wire(static_cast<std::uint32_t>(type)))
    throw usage_error(fmt::format("{}: dtype value {} is not one byteps carries (see bps::dtype)",
                                  what, static_cast<unsigned>(type)));
  if (data == nullptr && count != 0)
    throw usage_error(fmt::format("{}: the data pointer is null but the count is {}", what, count));
  if (opts.average && !is_floating(type))
    throw usage_error(
        fmt::format("{}: average is defined for floating dtypes only, and the "
                    "tensor is {}",
                    what, dtype_name(type)));
}

}  // namespace bps::worker
