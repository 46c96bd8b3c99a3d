#include <byteps/reduce/f16c.hpp>

#include <byteps/reduce/half.hpp>
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <vector>

// The F16C path must give exactly the software conversions' bits, or the result of a push_pull
// would depend on the CPU it ran on.

namespace {

std::vector<float> narrowing_inputs() {
  // Every fp16 value, every midpoint between neighbours, and the floats just around each
  // midpoint: where round-to-nearest-even decides.
  std::vector<float> f;
  for (std::uint32_t b = 0; b < 0xffff; ++b) {
    const float lo = bps::to_float(bps::float16{static_cast<std::uint16_t>(b)});
    const float hi = bps::to_float(bps::float16{static_cast<std::uint16_t>(b + 1)});
    f.push_back(lo);
    if (lo != lo || hi != hi || (b & 0x7fff) == 0x7bff || (b & 0x7fff) == 0x7c00) continue;
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    const auto m = std::bit_cast<std::uint32_t>(mid);
    f.push_back(mid);
    f.push_back(std::bit_cast<float>(m + 1));
    f.push_back(std::bit_cast<float>(m - 1));
  }
  f.push_back(70000.0f);   // overflows to infinity
  f.push_back(65520.0f);   // the first float that rounds to infinity
  f.push_back(1e-10f);     // underflows to zero
  return f;
}

}  // namespace

TEST_CASE("F16C conversions give the software conversions' bits", "[reduce][half][f16c]") {
  if (!bps::reduce::f16c::has_f16c()) {
    WARN("SKIPPED: this CPU has no F16C: only the software path runs here");
    return;
  }
  namespace f16c = bps::reduce::f16c;

  std::vector<bps::float16> all(65536);
  for (std::uint32_t b = 0; b <= 0xffff; ++b) all[b].bits = static_cast<std::uint16_t>(b);
  std::vector<float> wide(all.size());
  REQUIRE(f16c::widen(all.data(), wide.data(), all.size()) == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const float want = bps::to_float(all[i]);
    if (std::bit_cast<std::uint32_t>(wide[i]) != std::bit_cast<std::uint32_t>(want))
      FAIL("widen 0x" << std::hex << i);
  }

  auto in = narrowing_inputs();
  in.resize(in.size() / 8 * 8);
  std::vector<bps::float16> narrow(in.size());
  REQUIRE(f16c::narrow(in.data(), narrow.data(), in.size()) == in.size());
  for (std::size_t i = 0; i < in.size(); ++i)
    if (narrow[i].bits != bps::to_float16(in[i]).bits)
      FAIL("narrow " << in[i] << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(in[i])
                     << ") gave 0x" << narrow[i].bits << ", software 0x"
                     << bps::to_float16(in[i]).bits);

  std::vector<float> acc(all.size(), 0.375f), want_acc(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) want_acc[i] = 0.375f + bps::to_float(all[i]);
  REQUIRE(f16c::add_widened(acc.data(), all.data(), all.size()) == all.size());
  for (std::size_t i = 0; i < all.size(); ++i)
    if (std::bit_cast<std::uint32_t>(acc[i]) != std::bit_cast<std::uint32_t>(want_acc[i]))
      FAIL("add_widened 0x" << std::hex << i);

  for (float factor : {0.5f, 1.0f / 3.0f, 3.0f}) {
    auto scaled = all;
    REQUIRE(f16c::scale(scaled.data(), factor, scaled.size()) == scaled.size());
    for (std::size_t i = 0; i < all.size(); ++i)
      if (scaled[i].bits != bps::to_float16(bps::to_float(all[i]) * factor).bits)
        FAIL("scale 0x" << std::hex << i << " by " << factor);
  }
  SUCCEED("widen, narrow, add and scale agree on every fp16 value");
}
