#pragma once
/// @file
/// The bodies of compress/registry.hpp's `registry` (core/linkage.hpp: inline in header-only
/// mode, compiled once into byteps::compiled otherwise).

namespace bps::compress {

registry::registry() {
  add("none", {}, [](const param_reader&) { return wrap(identity{}); });
  add("fp16", {}, [](const param_reader&) { return wrap(fp16{}); });
  add("bf16", {}, [](const param_reader&) { return wrap(bf16{}); });
  add("onebit", {"scaling"},
      [](const param_reader& p) { return wrap(onebit(p.flag("scaling", false))); });
  add("topk", {"k"}, [](const param_reader& p) { return wrap(topk(p.number("k"))); });
  add("randomk", {"k", "seed", "unbiased"}, [](const param_reader& p) {
    return wrap(
        randomk(p.number("k"), p.whole("seed", randomk::default_seed), p.flag("unbiased", false)));
  });
  add("dithering", {"s", "partition", "normalize", "seed"}, [](const param_reader& p) {
    const std::uint64_t s = p.whole("s", 0);
    if (!p.has("s")) p.text("s");  // the error for a missing s
    if (s > std::numeric_limits<unsigned>::max())
      throw p.invalid("s", p.text("s"), "a number of levels (1 to 2^31)");
    return wrap(dithering(
        static_cast<unsigned>(s),
        static_cast<dithering::partition>(p.choice("partition", {"linear", "natural"}, 0)),
        static_cast<dithering::normalize>(p.choice("normalize", {"max", "l2"}, 0)),
        p.whole("seed", dithering::default_seed)));
  });
}

void registry::add(std::string algorithm, std::vector<std::string> params, factory make) {
  if (algorithm.empty() || algorithm.starts_with("ef_") || algorithm.starts_with("nesterov_"))
    throw usage_error(
        fmt::format("compressor registry: '{}' cannot name an algorithm; names "
                    "starting ef_ or nesterov_ are decorated ones",
                    algorithm));
  if (table_.contains(algorithm))
    throw usage_error(
        fmt::format("compressor registry: algorithm '{}' is already registered", algorithm));
  table_.emplace(std::move(algorithm), entry{std::move(params), std::move(make)});
}

std::vector<std::string> registry::algorithms() const {
  std::vector<std::string> names;
  for (const auto& [name, e] : table_) names.push_back(name);
  return names;
}

std::unique_ptr<any> registry::make(const recipe& r) const {
  std::string_view algorithm = r.name;
  const bool momentum = algorithm.starts_with("nesterov_");
  if (momentum) algorithm.remove_prefix(9);
  const bool ef = algorithm.starts_with("ef_");
  if (ef) algorithm.remove_prefix(3);
  const auto it = table_.find(algorithm);
  if (it == table_.end())
    throw usage_error(fmt::format(
        "compressor '{}': unknown algorithm '{}'; the known ones are {}, each may be prefixed "
        "with ef_ (error feedback) and then nesterov_ (momentum), e.g. nesterov_ef_onebit",
        r.name, algorithm, list(algorithms())));
  auto takes = it->second.params;
  if (momentum) takes.push_back("mu");
  for (const auto& [key, value] : r.params) {
    if (std::find(takes.begin(), takes.end(), key) == takes.end())
      throw usage_error(fmt::format("compressor '{}': unknown parameter '{}'; it takes {}",
                                    to_string(r), key,
                                    takes.empty() ? std::string("none") : list(takes)));
  }
  const param_reader p(r);
  auto c = it->second.make(p);
  if (ef) c = wrap(error_feedback<erased>(erased(std::move(c))));
  if (momentum) {
    const double mu = p.number("mu");
    c = wrap(nesterov<erased>(erased(std::move(c)), static_cast<float>(mu)));
  }
  return c;
}

std::string registry::list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace bps::compress
