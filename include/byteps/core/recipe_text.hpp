#pragma once
/// @file
/// The text form of a compressor recipe, as `BYTEPS_COMPRESSOR` and `--compressor` take it:
///
///   name[:key=value[,key=value]...]      e.g. "fp16", "topk:k=0.01", "ef_onebit:scaling=1",
///                                        "nesterov_ef_randomk:k=0.01,mu=0.9"
///
/// A name and keys are letters, digits and '_'; a value is any non-empty text without ',', '='
/// or white space; keys are distinct. Only the form is read here (in core/, so that
/// `Config::from_env()` can check the variable where it reads it); which names and parameters
/// exist is compress/registry.hpp's to say, and compress/recipe.hpp's `parse` makes a `recipe`.

#include <fmt/core.h>

#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::detail {

struct recipe_text {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;  ///< in the text's order
};

/// Reads `text`; a `usage_error` naming `what` (e.g. "BYTEPS_COMPRESSOR") and quoting the text
/// says what is wrong.
BYTEPS_DECL recipe_text parse_recipe_text(std::string_view text, std::string_view what);

}  // namespace bps::detail

#if BYTEPS_INCLUDE_BODIES
#include "byteps/core/impl/recipe_text.hpp"
#endif
