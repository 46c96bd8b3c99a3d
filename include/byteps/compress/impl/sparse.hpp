#pragma once
/// @file
/// The bodies of compress/sparse.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::compress {

void require_u32_indices(std::string_view compressor, std::size_t n) {
  if (n > std::numeric_limits<std::uint32_t>::max())
    throw usage_error(fmt::format(
        "compressor '{}': a partition of {} elements is too large for 32-bit indices; set "
        "BYTEPS_PARTITION_BYTES smaller",
        compressor, n));
}

std::size_t write_sparse(std::span<std::byte> out, std::span<const std::uint32_t> indices,
                         std::span<const float> x, float scale) noexcept {
  stream_writer w(out);
  w.put_u32(static_cast<std::uint32_t>(indices.size()));
  for (std::uint32_t i : indices) {
    w.put_u32(i);
    w.put_f32(scale == 1.0f ? x[i] : x[i] * scale);
  }
  return w.written();
}

void read_sparse(std::string_view compressor, std::span<const std::byte> in, std::span<float> y) {
  stream_reader r(compressor, in);
  const std::uint32_t count = r.get_u32();
  if (count > y.size())
    malformed(compressor, fmt::format("{} pairs for a tensor of {} elements", count, y.size()));
  require_size(compressor, fmt::format("stream of {} pairs", count), in.size(),
               sparse_bytes(count));
  std::fill(y.begin(), y.end(), 0.0f);
  std::uint64_t next_allowed = 0;
  for (std::uint32_t p = 0; p < count; ++p) {
    const std::uint32_t i = r.get_u32();
    const float v = r.get_f32();
    if (i < next_allowed || i >= y.size())
      malformed(compressor,
                fmt::format("pair {} has index {}, but indices must ascend and stay below {}", p, i,
                            y.size()));
    y[i] = v;
    next_allowed = std::uint64_t{i} + 1;
  }
}

}  // namespace bps::compress
