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

namespace bps::detail {

struct recipe_text {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;  ///< in the text's order
};

/// Reads `text`; a `usage_error` naming `what` (e.g. "BYTEPS_COMPRESSOR") and quoting the text
/// says what is wrong.
inline recipe_text parse_recipe_text(std::string_view text, std::string_view what) {
  const auto bad = [&](std::string_view why) {
    return usage_error(fmt::format(
        "{}='{}' is not valid: {}; expected name[:key=value[,key=value]...], e.g. "
        "'topk:k=0.01' or 'ef_onebit:scaling=1'",
        what, text, why));
  };
  const auto is_word = [](std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    return true;
  };
  recipe_text r;
  const auto colon = text.find(':');
  r.name = std::string(text.substr(0, colon));
  if (!is_word(r.name)) throw bad(fmt::format("the name '{}' is not letters, digits and _", r.name));
  if (colon == std::string_view::npos) return r;
  std::string_view rest = text.substr(colon + 1);
  if (rest.empty()) throw bad("nothing after ':'");
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) throw bad(fmt::format("'{}' is not key=value", item));
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!is_word(key)) throw bad(fmt::format("the key '{}' is not letters, digits and _", key));
    if (value.empty() || value.find_first_of("= \t\r\n") != std::string_view::npos)
      throw bad(fmt::format("the value of '{}' is empty or has '=' or white space", key));
    for (const auto& [k, v] : r.params)
      if (k == key) throw bad(fmt::format("the key '{}' is given twice", key));
    r.params.emplace_back(std::string(key), std::string(value));
    if (comma == std::string_view::npos) return r;
    rest = rest.substr(comma + 1);
  }
}

}  // namespace bps::detail
