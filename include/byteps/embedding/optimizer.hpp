#pragma once
/// @file
/// `embedding::optimizer`: what a server does to a row of an embedding table with the gradient summed
/// over the workers' pushes of a round, chosen by a recipe string as compressors are
/// (core/recipe_text.hpp's form):
///
///   sgd[:lr=0.01]                                   w -= lr g
///   adagrad[:lr=0.01,eps=1e-8,initial=0]            h += g g;  w -= lr g / (sqrt(h) + eps)
///   adam[:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-8]  per row, lazily: t += 1;
///       m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g;
///       w -= lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
///
/// "Lazy" as in TensorFlow's LazyAdam: a row's state (h; m, v and its own step t) changes only
/// in rounds that push it, so a step costs the rows it touches, not the table. Everything is
/// computed in float32 in the order written above (bias corrections in double, then rounded to
/// float once), so a reference that does the same gets the same bits.

#include <fmt/core.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "byteps/core/error.hpp"
#include "byteps/core/recipe_text.hpp"

namespace bps::embedding {

class optimizer {
 public:
  enum class rule { sgd, adagrad, adam };

  /// Reads `recipe` for table `table`; a `usage_error` naming both for anything else.
  static optimizer parse(std::string_view recipe, std::string_view table) {
    const auto what = fmt::format("the optimizer of table '{}'", table);
    const auto text = detail::parse_recipe_text(recipe, what);
    optimizer o;
    if (text.name == "sgd") {
      o.kind_ = rule::sgd;
      o.lr_ = 0.01f;
    } else if (text.name == "adagrad") {
      o.kind_ = rule::adagrad;
      o.lr_ = 0.01f;
      o.eps_ = 1e-8f;
    } else if (text.name == "adam") {
      o.kind_ = rule::adam;
      o.lr_ = 0.001f;
      o.eps_ = 1e-8f;
    } else {
      throw usage_error(fmt::format("{} is '{}': not sgd, adagrad or adam", what, recipe));
    }
    for (const auto& [key, value] : text.params) {
      float* field = nullptr;
      if (key == "lr") field = &o.lr_;
      if (key == "eps" && o.kind_ != rule::sgd) field = &o.eps_;
      if (key == "initial" && o.kind_ == rule::adagrad) field = &o.initial_;
      if (key == "beta1" && o.kind_ == rule::adam) field = &o.beta1_;
      if (key == "beta2" && o.kind_ == rule::adam) field = &o.beta2_;
      if (field == nullptr)
        throw usage_error(fmt::format("{} ('{}'): {} takes no parameter '{}'", what, recipe,
                                      text.name, key));
      *field = number(what, recipe, key, value);
    }
    const bool betas_ok = o.beta1_ >= 0 && o.beta1_ < 1 && o.beta2_ >= 0 && o.beta2_ < 1;
    if (!(o.lr_ > 0) || !(o.eps_ >= 0) || !(o.initial_ >= 0) || !betas_ok)
      throw usage_error(fmt::format(
          "{} ('{}'): lr must be positive, eps and initial not negative, beta1 and beta2 in "
          "[0, 1)",
          what, recipe));
    return o;
  }

  rule kind() const noexcept { return kind_; }

  /// Floats of state per row element: adagrad's h; adam's m and v.
  std::size_t state_per_element() const noexcept {
    return kind_ == rule::sgd ? 0 : kind_ == rule::adagrad ? 1 : 2;
  }
  /// A fresh row's state value (adagrad's `initial`; zero otherwise).
  float initial_state() const noexcept { return kind_ == rule::adagrad ? initial_ : 0.0f; }

  /// Updates one row: `w` (dim floats) with its gradient `g`, its state (`dim *
  /// state_per_element()` floats: h, or m then v) and its step count (adam's t).
  void apply(float* w, const float* g, float* state, std::uint64_t& step, std::size_t dim) const {
    switch (kind_) {
      case rule::sgd:
        for (std::size_t j = 0; j < dim; ++j) w[j] = w[j] - lr_ * g[j];
        return;
      case rule::adagrad:
        for (std::size_t j = 0; j < dim; ++j) {
          state[j] = state[j] + g[j] * g[j];
          w[j] = w[j] - lr_ * g[j] / (std::sqrt(state[j]) + eps_);
        }
        return;
      case rule::adam: {
        ++step;
        const auto t = static_cast<double>(step);
        const auto c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1_), t));
        const auto c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2_), t));
        float* m = state;
        float* v = state + dim;
        for (std::size_t j = 0; j < dim; ++j) {
          m[j] = beta1_ * m[j] + (1.0f - beta1_) * g[j];
          v[j] = beta2_ * v[j] + (1.0f - beta2_) * g[j] * g[j];
          w[j] = w[j] - lr_ * (m[j] / c1) / (std::sqrt(v[j] / c2) + eps_);
        }
        return;
      }
    }
  }

 private:
  static float number(const std::string& what, std::string_view recipe, const std::string& key,
                      const std::string& value) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || !std::isfinite(v))
      throw usage_error(fmt::format("{} ('{}'): {}={} is not a finite number", what, recipe, key,
                                    value));
    return static_cast<float>(v);
  }

  rule kind_ = rule::sgd;
  float lr_ = 0.01f, eps_ = 0.0f, initial_ = 0.0f, beta1_ = 0.9f, beta2_ = 0.999f;
};

}  // namespace bps::embedding
