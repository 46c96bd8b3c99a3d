#pragma once
/// @file
/// The bodies of core/recipe_text.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::detail {

recipe_text parse_recipe_text(std::string_view text, std::string_view what) {
  const auto bad = [&](std::string_view why) {
    return usage_error(
        fmt::format("{}='{}' is not valid: {}; expected name[:key=value[,key=value]...], e.g. "
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
  if (!is_word(r.name))
    throw bad(fmt::format("the name '{}' is not letters, digits and _", r.name));
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
