#pragma once
/// @file
/// The bodies of compress/topk.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::compress {

std::size_t topk::encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
  return encode_chosen(in, type, out, [this](std::span<const float> x, std::size_t k) {
    const auto magnitude = [&](std::uint32_t i) {
      return std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffu;
    };
    order_.resize(x.size());
    std::iota(order_.begin(), order_.end(), std::uint32_t{0});
    const auto before = [&](std::uint32_t a, std::uint32_t b) {
      const auto ma = magnitude(a), mb = magnitude(b);
      return ma != mb ? ma > mb : a < b;
    };
    std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(),
                     before);
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k));
    return std::pair{std::span<const std::uint32_t>(order_).first(k), 1.0f};
  });
}

}  // namespace bps::compress
