#pragma once
// Helpers shared by the unit tests (test_wire.cpp, test_rendezvous_messages.cpp, test_config.cpp).

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace bps_test {

inline constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();
inline constexpr std::uint32_t u32_max = std::numeric_limits<std::uint32_t>::max();

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

}  // namespace bps_test
