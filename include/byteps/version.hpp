#pragma once
/// @file
/// The library's version (the CMake project version).

#define BYTEPS_VERSION_MAJOR 0
#define BYTEPS_VERSION_MINOR 1
#define BYTEPS_VERSION_PATCH 0

namespace bps {
inline constexpr const char* version = "0.1.0";
}  // namespace bps
