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

void sum_of(void* out, std::span<const std::byte* const> inputs, std::size_t count, dtype t,
            std::vector<std::byte>& scratch) {
  if (inputs.empty() || count == 0) return;
  if (t == dtype::float16 || t == dtype::bfloat16) {
    scratch.resize(accumulator_bytes(t, count));
    accumulate_init(scratch.data(), inputs[0], count, t);
    for (std::size_t i = 1; i < inputs.size(); ++i)
      accumulate_add(scratch.data(), inputs[i], count, t);
    accumulate_finish(out, scratch.data(), count, t);
    return;
  }
  std::size_t next = 1;
  if (out != inputs[0] && inputs.size() >= 2) {  // the same adds, one pass fewer over memory
    detail::visit_dtype(t, [&]<class T>(std::type_identity<T>) {
      if constexpr (!detail::is_half_v<T>)  // fp16 and bf16 went through `scratch` above
        detail::add_pair_n(static_cast<T*>(out), reinterpret_cast<const T*>(inputs[0]),
                           reinterpret_cast<const T*>(inputs[1]), count);
    });
    next = 2;
  } else if (out != inputs[0]) {
    std::memcpy(out, inputs[0], count * dtype_size(t));
  }
  for (std::size_t i = next; i < inputs.size(); ++i) sum_into(out, inputs[i], count, t);
}

}  // namespace bps::reduce
