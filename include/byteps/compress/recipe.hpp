#pragma once
/// @file
/// A compressor by name and string parameters (`recipe`), as a trainer chooses one and as a
/// worker's declare will carry it to the servers: its byte form, BytePS's way of spelling it,
/// and the checked reading of its parameters. registry.hpp makes compressors from recipes.
///
/// Name: [nesterov_][ef_]<algorithm>, e.g. "topk", "ef_onebit", "nesterov_ef_randomk":
/// error feedback (`ef_`, BytePS's `vanilla`) wraps the algorithm, Nesterov momentum
/// (`nesterov_`) wraps both, in BytePS's order. Parameters (registry.hpp lists each
/// algorithm's): k, s, seed, scaling, unbiased, partition, normalize, and mu for nesterov.
///
/// Byte form, little-endian (wire/codec.hpp's strings: u32 length, then the bytes):
///   [u8 version = 1][string name][u32 count][count x (string key, string value)]
/// keys ascending and distinct, at most 64 of them.

#include <fmt/core.h>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/recipe_text.hpp"
#include "byteps/wire/codec.hpp"

namespace bps::compress {

using param_map = std::map<std::string, std::string, std::less<>>;

struct recipe {
  std::string name;  ///< e.g. "ef_topk"
  param_map params;  ///< e.g. {{"k", "0.01"}}
  friend bool operator==(const recipe&, const recipe&) = default;
};

/// The recipe as text, for messages: `ef_topk(k=0.01)`.
inline std::string to_string(const recipe& r) {
  std::string s = r.name + "(";
  const char* sep = "";
  for (const auto& [k, v] : r.params) s += fmt::format("{}{}={}", std::exchange(sep, ","), k, v);
  return s + ")";
}

/// The recipe in `text` (core/recipe_text.hpp's form: "ef_topk:k=0.01"); a `usage_error`
/// naming `what` (the variable or option) and quoting the text for anything else.
inline recipe parse(std::string_view text, std::string_view what = "compressor") {
  auto t = bps::detail::parse_recipe_text(text, what);
  recipe r{std::move(t.name), {}};
  for (auto& [k, v] : t.params) r.params.emplace(std::move(k), std::move(v));
  return r;
}

inline constexpr std::uint8_t recipe_format_version = 1;
inline constexpr std::size_t recipe_max_params = 64;

inline std::vector<std::byte> serialise(const recipe& r) {
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

/// The recipe in `bytes`; a usage error saying what is wrong for anything but serialise's form.
/// Only the form is checked here: registry.hpp's `make` checks the name and parameters.
inline recipe deserialise(std::span<const std::byte> bytes) {
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

/// The recipe a server uses to decode pushes and re-encode their sum: BytePS applies no
/// momentum on servers, and randomk's `unbiased` scaling was applied by the workers already.
inline recipe for_server(recipe r) {
  if (r.name.starts_with("nesterov_")) {
    r.name.erase(0, 9);
    r.params.erase("mu");
  }
  r.params.erase("unbiased");
  return r;
}

/// A recipe from BytePS's declare parameters, with or without the "byteps_" prefix:
/// `compressor_type` (onebit, topk, randomk, dithering, and our fp16, bf16),
/// `compressor_k` (k; dithering's s), `compressor_onebit_scaling`, `seed`,
/// `dithering_partition` (0 linear, 1 natural), `dithering_normalize` (0 max, 1 l2),
/// `ef_type` or `error_feedback_type` (vanilla), `momentum_type` (nesterov), `momentum_mu`.
inline recipe from_byteps(const param_map& kwargs) {
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

/// A recipe's parameters read as typed values; every error names the compressor, the key and
/// what it takes.
class param_reader {
 public:
  explicit param_reader(const recipe& r) : r_(r) {}

  bool has(std::string_view key) const { return r_.params.find(key) != r_.params.end(); }

  std::string_view text(std::string_view key) const {
    auto it = r_.params.find(key);
    if (it == r_.params.end())
      throw usage_error(
          fmt::format("compressor '{}': parameter '{}' is required", to_string(r_), key));
    return it->second;
  }

  double number(std::string_view key) const {
    const auto t = text(key);
    double v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || end != t.data() + t.size() || !std::isfinite(v))
      throw invalid(key, t, "a finite number");
    return v;
  }
  double number(std::string_view key, double otherwise) const {
    return has(key) ? number(key) : otherwise;
  }

  std::uint64_t whole(std::string_view key, std::uint64_t otherwise) const {
    if (!has(key)) return otherwise;
    const auto t = text(key);
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || end != t.data() + t.size()) throw invalid(key, t, "a whole number");
    return v;
  }

  bool flag(std::string_view key, bool otherwise) const {
    if (!has(key)) return otherwise;
    const auto t = text(key);
    if (t == "1" || t == "true" || t == "True") return true;
    if (t == "0" || t == "false" || t == "False") return false;
    throw invalid(key, t, "1, 0, true or false");
  }

  /// The index in `choices` of the parameter's value.
  std::size_t choice(std::string_view key, std::initializer_list<std::string_view> choices,
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

  /// The error for a parameter whose value is not what it takes.
  usage_error invalid(std::string_view key, std::string_view value, std::string_view takes) const {
    return usage_error(fmt::format("compressor '{}': parameter {} = '{}' is not {}", to_string(r_),
                                   key, value, takes));
  }
  const recipe& r_;
};

}  // namespace bps::compress
