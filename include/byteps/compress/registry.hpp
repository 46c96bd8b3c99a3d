#pragma once
/// @file
/// Makes compressors from recipes (recipe.hpp): a name such as "ef_topk" and string parameters
/// such as {{"k", "0.01"}}, as BytePS makes them from `byteps_compressor_type` and friends. A
/// server will make its compressor for a key from the recipe a worker declared
/// (`for_server(recipe)`), and `by_name` gives `push_pull_options::compressor` for one.
///
/// Built-in algorithms and their parameters (BytePS's names in recipe.hpp's `from_byteps`):
///   none                                   no compression (compressor.hpp's `identity`)
///   fp16, bf16                             cast.hpp
///   onebit     scaling=false               onebit.hpp
///   topk       k (a count, or a fraction under 1)                        topk.hpp
///   randomk    k, seed=2020, unbiased=false                              randomk.hpp
///   dithering  s, partition=linear|natural, normalize=max|l2, seed=2020  dithering.hpp
/// Prefixes: `ef_` wraps the algorithm in error feedback (error_feedback.hpp), `nesterov_`
/// wraps that in Nesterov momentum and takes `mu` (nesterov.hpp): "nesterov_ef_onebit".
/// A name or parameter that is not known is a `usage_error` naming it and listing the known.
///
/// A research prototype adds its own algorithm to a `registry` with `add`; the prefixes work
/// for it too.

#include <fmt/core.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "byteps/compress/cast.hpp"
#include "byteps/compress/compressor.hpp"
#include "byteps/compress/dithering.hpp"
#include "byteps/compress/error_feedback.hpp"
#include "byteps/compress/nesterov.hpp"
#include "byteps/compress/onebit.hpp"
#include "byteps/compress/randomk.hpp"
#include "byteps/compress/recipe.hpp"
#include "byteps/compress/topk.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::compress {

class registry {
 public:
  using factory = std::function<std::unique_ptr<any>(const param_reader&)>;

  /// The built-in algorithms.
  BYTEPS_DECL registry();

  /// Adds an algorithm taking the parameters `params` (others are refused before `make` runs).
  BYTEPS_DECL void add(std::string algorithm, std::vector<std::string> params, factory make);

  /// The algorithms known, in name order.
  BYTEPS_DECL std::vector<std::string> algorithms() const;

  BYTEPS_DECL std::unique_ptr<any> make(const recipe& r) const;

 private:
  struct entry {
    std::vector<std::string> params;
    factory make;
  };

  template <Compressor C>
  static std::unique_ptr<any> wrap(C c) {
    return std::make_unique<holder<C>>(std::move(c));
  }
  BYTEPS_DECL static std::string list(const std::vector<std::string>& names);

  std::map<std::string, entry, std::less<>> table_;
};

/// Makes a built-in compressor from a recipe.
inline std::unique_ptr<any> make(const recipe& r) {
  return registry().make(r);
}

/// Makes a built-in compressor: `make("topk", {{"k", "0.01"}})`.
inline std::unique_ptr<any> make(std::string_view name, param_map params = {}) {
  return make(recipe{std::string(name), std::move(params)});
}

/// `push_pull_options::compressor` for a recipe, made by `reg` (the built-ins by default). The
/// recipe is checked here, so a bad one fails where it is named, not at the first push_pull.
class recipe_spec final : public spec {
 public:
  explicit recipe_spec(recipe r, registry reg = {})
      : recipe_(std::move(r)), registry_(std::move(reg)), name_(registry_.make(recipe_)->name()) {}
  const std::string& name() const override { return name_; }
  std::unique_ptr<any> make() const override { return registry_.make(recipe_); }
  const compress::recipe& made_from() const noexcept { return recipe_; }
  std::optional<compress::recipe> declared() const override { return recipe_; }

 private:
  compress::recipe recipe_;
  registry registry_;
  std::string name_;
};

/// `none()` for the recipe "none" (no parameters).
inline std::shared_ptr<const spec> by_name(recipe r, registry reg = {}) {
  if (r.name == "none" && r.params.empty()) return none();
  return std::make_shared<const recipe_spec>(std::move(r), std::move(reg));
}
inline std::shared_ptr<const spec> by_name(std::string_view name, param_map params = {}) {
  return by_name(recipe{std::string(name), std::move(params)});
}

}  // namespace bps::compress

#if BYTEPS_INCLUDE_BODIES
#include "byteps/compress/impl/registry.hpp"
#endif
