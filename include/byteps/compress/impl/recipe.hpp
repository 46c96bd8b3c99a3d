#pragma once
/// @file
/// The bodies of compress/recipe.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::compress {

std::string to_string(const recipe& r) {
  std::string s = r.name + "(";
  const char* sep = "";
  for (const auto& [k, v] : r.params) s += fmt::format("{}{}={}", std::exchange(sep, ","), k, v);
  return s + ")";
}

recipe parse(std::string_view text, std::string_view what) {
  auto t = bps::detail::parse_recipe_text(text, what);
  recipe r{std::move(t.name), {}};
  for (auto& [k, v] : t.params) r.params.emplace(std::move(k), std::move(v));
  return r;
}

std::vector<std::byte> serialise(const recipe& r) {
  wire::byte_writer w;
  w.put<std::uint8_t>(recipe_format_version);
  w.put_string(r.name);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(r.params.size()));
  for (const auto& [k, v] : r.params) {
    w.put_string(k);
    w.put_string(v);
  }
  return w.take();
}

recipe deserialise(std::span<const std::byte> bytes) {
  const auto bad = [](std::string_view what) {
    return usage_error(fmt::format("compressor recipe: malformed bytes: {}", what));
  };
  try {
    wire::byte_reader in(bytes);
    if (const auto v = in.get<std::uint8_t>(); v != recipe_format_version)
      throw bad(fmt::format("format version {}, expected {}", v, recipe_format_version));
    recipe r;
    r.name = in.get_string(256);
    const auto count = in.get<std::uint32_t>();
    if (count > recipe_max_params) throw bad(fmt::format("{} parameters", count));
    for (std::uint32_t i = 0; i < count; ++i) {
      auto key = in.get_string(256);
      auto value = in.get_string(256);
      if (!r.params.empty() && key <= r.params.rbegin()->first)
        throw bad(fmt::format("parameter '{}' out of order or repeated", key));
      r.params.emplace(std::move(key), std::move(value));
    }
    if (!in.done()) throw bad("bytes after the last parameter");
    return r;
  } catch (const wire::decode_error& e) {
    throw bad(e.what());
  }
}

recipe for_server(recipe r) {
  if (r.name.starts_with("nesterov_")) {
    r.name.erase(0, 9);
    r.params.erase("mu");
  }
  r.params.erase("unbiased");
  return r;
}

recipe from_byteps(const param_map& kwargs) {
  recipe r;
  std::string ef, momentum;
  param_map p;
  for (const auto& [raw_key, value] : kwargs) {
    const std::string_view key = std::string_view(raw_key).starts_with("byteps_")
                                     ? std::string_view(raw_key).substr(7)
                                     : std::string_view(raw_key);
    if (key == "compressor_type")
      r.name = value;
    else if (key == "compressor_k")
      p["k"] = value;
    else if (key == "compressor_onebit_scaling")
      p["scaling"] = value;
    else if (key == "seed")
      p["seed"] = value;
    else if (key == "dithering_partition")
      p["partition"] = value == "0" ? "linear" : value == "1" ? "natural" : value;
    else if (key == "dithering_normalize")
      p["normalize"] = value == "0" ? "max" : value == "1" ? "l2" : value;
    else if (key == "ef_type" || key == "error_feedback_type")
      ef = value;
    else if (key == "momentum_type")
      momentum = value;
    else if (key == "momentum_mu")
      p["mu"] = value;
    else
      throw usage_error(fmt::format(
          "compressor parameters: unknown key '{}'; BytePS's keys are compressor_type, "
          "compressor_k, compressor_onebit_scaling, seed, dithering_partition, "
          "dithering_normalize, ef_type (or error_feedback_type), momentum_type, momentum_mu, "
          "each with or without the prefix byteps_",
          raw_key));
  }
  if (r.name.empty())
    throw usage_error(
        "compressor parameters: compressor_type is missing (onebit, topk, "
        "randomk, dithering, fp16, bf16)");
  if (r.name == "dithering" && p.contains("k")) p["s"] = std::move(p.extract("k").mapped());
  if (!ef.empty() && ef != "vanilla")
    throw usage_error(fmt::format(
        "compressor parameters: error feedback type '{}' is unknown; the known one is vanilla",
        ef));
  if (!momentum.empty() && momentum != "nesterov")
    throw usage_error(fmt::format(
        "compressor parameters: momentum type '{}' is unknown; the known one is nesterov",
        momentum));
  r.name = (momentum.empty() ? "" : "nesterov_") + (ef.empty() ? std::string() : "ef_") + r.name;
  r.params = std::move(p);
  return r;
}

}  // namespace bps::compress
namespace bps::compress {

std::string_view param_reader::text(std::string_view key) const {
  auto it = r_.params.find(key);
  if (it == r_.params.end())
    throw usage_error(
        fmt::format("compressor '{}': parameter '{}' is required", to_string(r_), key));
  return it->second;
}

double param_reader::number(std::string_view key) const {
  const auto t = text(key);
  double v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc{} || end != t.data() + t.size() || !std::isfinite(v))
    throw invalid(key, t, "a finite number");
  return v;
}

double param_reader::number(std::string_view key, double otherwise) const {
  return has(key) ? number(key) : otherwise;
}

std::uint64_t param_reader::whole(std::string_view key, std::uint64_t otherwise) const {
  if (!has(key)) return otherwise;
  const auto t = text(key);
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc{} || end != t.data() + t.size()) throw invalid(key, t, "a whole number");
  return v;
}

bool param_reader::flag(std::string_view key, bool otherwise) const {
  if (!has(key)) return otherwise;
  const auto t = text(key);
  if (t == "1" || t == "true" || t == "True") return true;
  if (t == "0" || t == "false" || t == "False") return false;
  throw invalid(key, t, "1, 0, true or false");
}

std::size_t param_reader::choice(std::string_view key,
                                 std::initializer_list<std::string_view> choices,
                                 std::size_t otherwise) const {
  if (!has(key)) return otherwise;
  const auto t = text(key);
  std::size_t i = 0;
  std::string known;
  for (auto c : choices) {
    if (c == t) return i;
    known += fmt::format("{}{}", i++ == 0 ? "" : ", ", c);
  }
  throw invalid(key, t, "one of " + known);
}

usage_error param_reader::invalid(std::string_view key, std::string_view value,
                                  std::string_view takes) const {
  return usage_error(fmt::format("compressor '{}': parameter {} = '{}' is not {}", to_string(r_),
                                 key, value, takes));
}

}  // namespace bps::compress
