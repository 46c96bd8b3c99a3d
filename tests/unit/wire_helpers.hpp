#pragma once
// Helpers shared by test_wire.cpp and test_rendezvous_messages.cpp.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace bps_test {

inline constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();
inline constexpr std::uint32_t u32_max = std::numeric_limits<std::uint32_t>::max();

inline bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace bps_test
