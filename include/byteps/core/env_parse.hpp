#pragma once
/// @file
/// How `Config::from_env()` reads one variable: set-but-empty counts as unset, numbers are whole
/// decimal numbers in a range, and a bad value is a `usage_error` naming the variable, quoting
/// the value and saying what was expected. Only `from_env()` calls these.

#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>

#include "byteps/core/error.hpp"

namespace bps {

namespace detail {

inline const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

inline long long parse_env_integer(const char* name, const char* text, long long min,
                                   long long max) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < min || v > max) {
    throw usage_error(fmt::format("{}='{}' is not valid: expected a whole number from {} to {}",
                                  name, text, min, max));
  }
  return v;
}

inline long long env_integer(const char* name, long long fallback, long long min, long long max,
                             bool required = false) {
  const char* v = env_or_null(name);
  if (v == nullptr) {
    if (required) {
      throw usage_error(
          fmt::format("{} is not set: expected a whole number from {} to {}", name, min, max));
    }
    return fallback;
  }
  return parse_env_integer(name, v, min, max);
}

}  // namespace detail

}  // namespace bps
