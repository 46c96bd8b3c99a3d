#pragma once
// Helpers shared by the unit tests: test_wire.cpp, test_rendezvous_messages.cpp, test_config.cpp
// and test_trace.cpp use the first ones, and the server-side tests (test_key_state.cpp,
// test_server_handler.cpp) build their frames and payloads with the others, so that both drive
// the server with the same frames.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <byteps/core/dtype.hpp>
#include <byteps/detail/buffer_pool.hpp>
#include <byteps/wire/frame.hpp>

namespace bps_test {

inline constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();
inline constexpr std::uint32_t u32_max = std::numeric_limits<std::uint32_t>::max();

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

/// The key of the one tensor the server-side tests send (their messages call it 'grad').
inline constexpr std::uint64_t grad_key = 42;

/// A frame of `type` (a push or a sum_offer) from worker `sender` for round `round` of 'grad',
/// partition 0 of a float32 tensor of `tensor_bytes`, as a worker sends it. The payload's size
/// is left to the caller: a test of a wrong size sets it apart from the tensor's.
inline bps::wire::header grad_frame(bps::wire::msg type, std::uint64_t round,
                                    std::uint64_t tensor_bytes, std::uint32_t sender = 0) {
  bps::wire::header h;
  h.type = type;
  h.sender = sender;
  h.key = grad_key;
  h.part = 0;
  h.dtype = static_cast<std::uint32_t>(bps::dtype::float32);
  h.round = round;
  h.tensor_bytes = tensor_bytes;
  h.offset = 0;
  return h;
}

/// `v` in a buffer of `pool`, as the server's receive path hands a payload to its handler.
inline bps::detail::buffer_pool::buffer pooled_floats(bps::detail::buffer_pool& pool,
                                                      const std::vector<float>& v) {
  auto b = pool.take(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(b.data.get(), v.data(), b.size);
  return b;
}

/// The floats in `bytes` (a sum the server keeps or answers with).
inline std::vector<float> as_floats(std::span<const std::byte> bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

/// `n` bytes in a pattern that `seed` shifts, so that payloads told apart by seed differ.
inline std::vector<std::byte> patterned_bytes(std::size_t n, int seed) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 13 + seed) & 0xff);
  return b;
}

}  // namespace bps_test
