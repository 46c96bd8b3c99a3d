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
#include "byteps/core/linkage.hpp"
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
BYTEPS_DECL std::string to_string(const recipe& r);

/// The recipe in `text` (core/recipe_text.hpp's form: "ef_topk:k=0.01"); a `usage_error`
/// naming `what` (the variable or option) and quoting the text for anything else.
BYTEPS_DECL recipe parse(std::string_view text, std::string_view what = "compressor");

inline constexpr std::uint8_t recipe_format_version = 1;
inline constexpr std::size_t recipe_max_params = 64;

BYTEPS_DECL std::vector<std::byte> serialise(const recipe& r);

/// The recipe in `bytes`; a usage error saying what is wrong for anything but serialise's form.
/// Only the form is checked here: registry.hpp's `make` checks the name and parameters.
BYTEPS_DECL recipe deserialise(std::span<const std::byte> bytes);

/// The recipe a server uses to decode pushes and re-encode their sum: BytePS applies no
/// momentum on servers, and randomk's `unbiased` scaling was applied by the workers already.
BYTEPS_DECL recipe for_server(recipe r);

/// A recipe from BytePS's declare parameters, with or without the "byteps_" prefix:
/// `compressor_type` (onebit, topk, randomk, dithering, and our fp16, bf16),
/// `compressor_k` (k; dithering's s), `compressor_onebit_scaling`, `seed`,
/// `dithering_partition` (0 linear, 1 natural), `dithering_normalize` (0 max, 1 l2),
/// `ef_type` or `error_feedback_type` (vanilla), `momentum_type` (nesterov), `momentum_mu`.
BYTEPS_DECL recipe from_byteps(const param_map& kwargs);

/// A recipe's parameters read as typed values; every error names the compressor, the key and
/// what it takes.
class param_reader {
 public:
  explicit param_reader(const recipe& r) : r_(r) {}

  bool has(std::string_view key) const { return r_.params.find(key) != r_.params.end(); }

  BYTEPS_DECL std::string_view text(std::string_view key) const;

  BYTEPS_DECL double number(std::string_view key) const;
  BYTEPS_DECL double number(std::string_view key, double otherwise) const;

  BYTEPS_DECL std::uint64_t whole(std::string_view key, std::uint64_t otherwise) const;

  BYTEPS_DECL bool flag(std::string_view key, bool otherwise) const;

  /// The index in `choices` of the parameter's value.
  BYTEPS_DECL std::size_t choice(std::string_view key,
                                 std::initializer_list<std::string_view> choices,
                                 std::size_t otherwise) const;

  /// The error for a parameter whose value is not what it takes.
  BYTEPS_DECL usage_error invalid(std::string_view key, std::string_view value,
                                  std::string_view takes) const;
  const recipe& r_;
};

}  // namespace bps::compress

#if BYTEPS_INCLUDE_BODIES
#include "byteps/compress/impl/recipe.hpp"
#endif
