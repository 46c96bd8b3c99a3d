#pragma once
/// @file
/// The bodies of compress/dithering.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::compress {

dithering::dithering(unsigned s, partition p, normalize norm, std::uint64_t seed)
    : s_(s),
      partition_(p),
      normalize_(norm),
      seed_(seed),
      rng_(seed, "dithering"),
      name_(fmt::format("dithering(s={},partition={},normalize={},seed={})", s, partition_name(p),
                        norm == normalize::max ? "max" : "l2", seed)) {
  const unsigned most = p == partition::natural ? 31u : 1u << 31;
  if (s < 1 || s > most)
    throw usage_error(
        fmt::format("compressor 'dithering': s = {} is out of range; {} "
                    "partition takes 1 to {} levels",
                    s, partition_name(p), most));
}

std::size_t dithering::encode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
  const std::size_t n = float_elements(name_, in.size(), type);
  require_room(name_, out.size(), 8 + (max_bits(n) + 7) / 8);
  const auto x = read_floats(in, type, scratch_);
  const float norm = norm_of(x);
  if (!std::isfinite(norm))
    throw usage_error(fmt::format(
        "compressor '{}': the tensor's norm is {} (it holds an infinity or NaN, or its l2 norm "
        "is past fp32's range); it cannot be quantised",
        name_, norm));
  bit_writer bits(out.subspan(8));
  const double S = top_level();
  std::uint64_t previous = 0;  // index + 1 of the last nonzero level
  for (std::size_t i = 0; i < n; ++i) {
    const double u = rng_.unit();
    if (norm == 0) continue;
    const double r = std::min(std::fabs(static_cast<double>(x[i])) / norm * S, S);
    const std::uint64_t level = quantise(r, u);
    if (level == 0) continue;
    put_elias_delta(bits, i + 1 - previous);
    bits.put(std::signbit(x[i]));
    put_elias_delta(bits, level);
    previous = i + 1;
  }
  stream_writer w(out);
  w.put_f32(norm);
  w.put_u32(static_cast<std::uint32_t>(bits.bits()));
  return 8 + bits.bytes();
}

void dithering::decode(std::span<const std::byte> in, dtype type, std::span<std::byte> out) {
  decode_as_floats(name_, out, type, scratch_, [&](std::span<float> y) {
    const std::size_t n = y.size();
    stream_reader r(name_, in);
    const double norm = r.get_f32();
    const std::uint32_t bit_count = r.get_u32();
    require_size(name_, fmt::format("stream of {} bits", bit_count), in.size(),
                 8 + (std::size_t{bit_count} + 7) / 8);
    if (bit_count % 8 != 0 &&
        (std::to_integer<unsigned>(in.back()) & (0xffu >> (bit_count % 8))) != 0)
      malformed(name_, "padding bits after the bit stream are set");
    std::fill(y.begin(), y.end(), 0.0f);
    bit_reader bits(name_, r.rest(), bit_count);
    const double S = top_level();
    std::uint64_t next = 0;  // the index a gap of 1 points at
    while (!bits.done()) {
      const std::uint64_t gap = get_elias_delta(bits);
      if (gap > n - next)
        malformed(name_, fmt::format("an element past the tensor's {} elements", n));
      const std::uint64_t i = next + gap - 1;
      const bool negative = bits.get();
      const std::uint64_t level = get_elias_delta(bits);
      if (level > top_level())
        malformed(name_, fmt::format("level {} above the top level {}", level, top_level()));
      const auto v = static_cast<float>(static_cast<double>(level) * norm / S);
      y[i] = negative ? -v : v;
      next = i + 1;
    }
  });
}

}  // namespace bps::compress
