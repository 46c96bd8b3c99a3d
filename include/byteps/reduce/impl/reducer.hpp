#pragma once
/// @file
/// The bodies of reduce/reducer.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::reduce {

void accumulate_init(void* acc, const void* src, std::size_t count, dtype t) {
  switch (t) {
    case dtype::float16:
      widen_to_f32(static_cast<const float16*>(src), static_cast<float*>(acc), count);
      return;
    case dtype::bfloat16:
      widen_to_f32(static_cast<const bfloat16*>(src), static_cast<float*>(acc), count);
      return;
    case dtype::float32:
    case dtype::float64:
    case dtype::int8:
    case dtype::uint8:
    case dtype::int32:
    case dtype::int64:
      if (count != 0) std::memcpy(acc, src, count * dtype_size(t));
      return;
  }
  detail::throw_unknown_dtype(t);
}

void accumulate_add(void* acc, const void* src, std::size_t count, dtype t) {
  detail::visit_dtype(t, [&]<class T>(std::type_identity<T>) {
    if constexpr (detail::is_half_v<T>) {
      detail::add_widened_n(static_cast<float*>(acc), static_cast<const T*>(src), count);
    } else {
      detail::add_n(static_cast<T*>(acc), static_cast<const T*>(src), count);
    }
  });
}

void accumulate_finish(void* out, const void* acc, std::size_t count, dtype t) {
  switch (t) {
    case dtype::float16:
    case dtype::bfloat16:
      if (out == acc) {
        if (t == dtype::float16) {
          detail::narrow_in_place<float16>(static_cast<float*>(out), count);
        } else {
          detail::narrow_in_place<bfloat16>(static_cast<float*>(out), count);
        }
      } else if (t == dtype::float16) {
        narrow_from_f32(static_cast<const float*>(acc), static_cast<float16*>(out), count);
      } else {
        narrow_from_f32(static_cast<const float*>(acc), static_cast<bfloat16*>(out), count);
      }
      return;
    case dtype::float32:
    case dtype::float64:
    case dtype::int8:
    case dtype::uint8:
    case dtype::int32:
    case dtype::int64:
      if (out != acc && count != 0) std::memcpy(out, acc, count * dtype_size(t));
      return;
  }
  detail::throw_unknown_dtype(t);
}

void sum_into(void* dst, const void* src, std::size_t count, dtype t) {
  detail::visit_dtype(t, [&]<class T>(std::type_identity<T>) {
    if constexpr (detail::is_half_v<T>) {
      detail::add_half_n(static_cast<T*>(dst), static_cast<const T*>(src), count);
    } else {
      detail::add_n(static_cast<T*>(dst), static_cast<const T*>(src), count);
    }
  });
}

void scale(void* data, std::size_t count, dtype t, double factor) {
  switch (t) {
    case dtype::float32:
      detail::scale_n(static_cast<float*>(data), count, static_cast<float>(factor));
      return;
    case dtype::float64:
      detail::scale_n(static_cast<double*>(data), count, factor);
      return;
    case dtype::float16:
      detail::scale_half_n(static_cast<float16*>(data), count, static_cast<float>(factor));
      return;
    case dtype::bfloat16:
      detail::scale_half_n(static_cast<bfloat16*>(data), count, static_cast<float>(factor));
      return;
    case dtype::int8:
    case dtype::uint8:
    case dtype::int32:
    case dtype::int64:
      throw usage_error("bps::reduce::scale: cannot average a tensor of dtype " +
                        std::string(dtype_name(t)) +
                        ": averaging is defined for floating dtypes only");
  }
  detail::throw_unknown_dtype(t);
}

void fill_negative_zero(void* data, std::size_t count, dtype t) {
  auto fill = [&]<class U>(U pattern) {
    auto* p = static_cast<U*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] = pattern;
  };
  switch (t) {
    case dtype::float32:
      return fill(std::uint32_t{0x80000000u});
    case dtype::float64:
      return fill(std::uint64_t{0x8000000000000000ull});
    case dtype::float16:
    case dtype::bfloat16:
      return fill(std::uint16_t{0x8000u});
    case dtype::int8:
    case dtype::uint8:
    case dtype::int32:
    case dtype::int64:
      std::memset(data, 0, count * dtype_size(t));
      return;
  }
  detail::throw_unknown_dtype(t);
}

namespace detail {

// Out of line, so that each loop keeps its `__restrict` (inlined into `sum_of_half`, GCC
// vectorised the bf16 add only behind an overlap check that sent it to the scalar loop).
template <class H, std::size_t N>
[[gnu::noinline]] void widen_block(float* __restrict acc, const H* __restrict src) noexcept {
  for (std::size_t e = 0; e < N; ++e) acc[e] = to_float(src[e]);
}
template <class H, std::size_t N>
[[gnu::noinline]] void add_widened_block(float* __restrict acc, const H* __restrict src) noexcept {
  for (std::size_t e = 0; e < N; ++e) acc[e] += to_float(src[e]);
}
template <class H, std::size_t N>
[[gnu::noinline]] void narrow_block(H* __restrict out, const float* __restrict acc) noexcept {
  for (std::size_t e = 0; e < N; ++e) out[e] = from_float(acc[e], H{});
}

/// fp16/bf16 `sum_of`: block by block through an fp32 accumulator small enough to stay in the
/// first-level cache, so each input is read once and the sum written once; the fp32 additions
/// and the one rounding are those of `accumulate_init`, `accumulate_add` and
/// `accumulate_finish` over the whole buffers.
template <class H>
void sum_of_half(H* out, std::span<const std::byte* const> inputs, std::size_t count) {
  constexpr std::size_t block = 256;  // all inputs advance together, a few lines at a time
  alignas(64) float acc[block];
  auto input = [&](std::size_t i, std::size_t at) {
    return reinterpret_cast<const H*>(inputs[i]) + at;
  };
  std::size_t done = 0;
  if constexpr (std::is_same_v<H, float16>) {
    if (f16c::has_f16c()) {
      for (; done + block <= count; done += block) {
        f16c::widen(input(0, done), acc, block);
        for (std::size_t i = 1; i < inputs.size(); ++i)
          f16c::add_widened(acc, input(i, done), block);
        f16c::narrow(acc, out + done, block);  // `out` may be inputs[0]: this block was read
      }
    }
  }
  // bf16, and fp16 without F16C: the same loops as `accumulate_*`, a block at a time.
  for (; done + block <= count; done += block) {
    widen_block<H, block>(acc, input(0, done));
    for (std::size_t i = 1; i < inputs.size(); ++i)
      add_widened_block<H, block>(acc, input(i, done));
    narrow_block<H, block>(out + done, acc);
  }
  if (done == count) return;
  const std::size_t len = count - done;
  widen_to_f32(input(0, done), acc, len);
  for (std::size_t i = 1; i < inputs.size(); ++i) add_widened_n(acc, input(i, done), len);
  narrow_from_f32(acc, out + done, len);
}

/// The other dtypes: the first four inputs in one pass, then up to three more per pass.
template <class T>
void sum_of_typed(T* out, std::span<const std::byte* const> inputs, std::size_t count) {
  auto in = [&](std::size_t i) { return reinterpret_cast<const T*>(inputs[i]); };
  std::size_t next = 0;
  if (out == in(0)) {
    next = 1;  // in place: the sum starts as the first input
  } else {
    switch (inputs.size()) {
      case 1:
        std::memcpy(out, in(0), count * sizeof(T));
        return;
      case 2:
        add_pair_n(out, in(0), in(1), count);
        return;
      case 3:
        add_three_n(out, in(0), in(1), in(2), count);
        return;
      default:
        add_four_n(out, in(0), in(1), in(2), in(3), count);
        next = 4;
    }
  }
  while (next < inputs.size()) {
    const std::size_t left = inputs.size() - next;
    if (left >= 3) {
      add_three_into_n(out, in(next), in(next + 1), in(next + 2), count);
      next += 3;
    } else if (left == 2) {
      add_two_into_n(out, in(next), in(next + 1), count);
      next += 2;
    } else {
      add_n(out, in(next), count);
      next += 1;
    }
  }
}

}  // namespace detail

void sum_of(void* out, std::span<const std::byte* const> inputs, std::size_t count, dtype t) {
  if (inputs.empty() || count == 0) return;
  detail::visit_dtype(t, [&]<class T>(std::type_identity<T>) {
    if constexpr (detail::is_half_v<T>) {
      detail::sum_of_half(static_cast<T*>(out), inputs, count);
    } else {
      detail::sum_of_typed(static_cast<T*>(out), inputs, count);
    }
  });
}

}  // namespace bps::reduce
