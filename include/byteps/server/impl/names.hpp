#pragma once
/// @file
/// The bodies of server/names.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::server {

std::optional<std::string> tensor_names::declare(std::uint64_t key, const std::string& name,
                                                 const std::optional<compress::recipe>& recipe,
                                                 const compress::registry& reg, int worker) {
  std::lock_guard lock(mu_);
  if (name.size() > max_name_bytes_) {
    ++refused_for_limits_;
    return fmt::format(
        "worker {} declared a tensor name of {} bytes, longer than this job "
        "allows (BYTEPS_MAX_NAME_BYTES={}); it begins '{}'",
        worker, name.size(), max_name_bytes_, name.substr(0, 64));
  }
  auto it = names_.find(key);
  if (it == names_.end() && names_.size() >= max_tensors_) {
    ++refused_for_limits_;
    return fmt::format(
        "tensor '{}' from worker {}: this server holds {} tensors already, "
        "the most this job allows (BYTEPS_MAX_TENSORS={})",
        name, worker, names_.size(), max_tensors_);
  }
  if (it == names_.end()) {
    entry e{name, recipe, nullptr};
    if (recipe) {
      try {
        e.codec = std::make_shared<const compress::recipe_spec>(compress::for_server(*recipe), reg);
      } catch (const std::exception& x) {
        return fmt::format(
            "tensor '{}': this server cannot make compressor '{}' that worker "
            "{} declared: {}",
            name, compress::to_string(*recipe), worker, x.what());
      }
    }
    names_.emplace(key, std::move(e));
    return std::nullopt;
  }
  if (it->second.name != name)
    return fmt::format("tensor names '{}' and '{}' hash to the same key {:#x}; rename one of them",
                       it->second.name, name, key);
  if (it->second.recipe != recipe)
    return fmt::format(
        "tensor '{}': worker {} declared it with {}, but another worker "
        "declared it with {}; every worker must give a tensor the same "
        "compressor",
        name, worker, describe(recipe), describe(it->second.recipe));
  return std::nullopt;
}

std::optional<std::string> tensor_names::declare(std::uint64_t key, const wire::declaration& d,
                                                 const compress::registry& reg, int worker) {
  std::optional<compress::recipe> recipe;
  if (!d.recipe.empty()) {
    try {
      recipe = compress::deserialise(d.recipe);
    } catch (const std::exception& e) {
      return fmt::format("tensor '{}' from worker {}: {}", d.name, worker, e.what());
    }
  }
  return declare(key, d.name, recipe, reg, worker);
}

std::string tensor_names::describe(const std::optional<compress::recipe>& r) {
  return r ? fmt::format("compressor '{}'", compress::to_string(*r))
           : std::string("no compressor that servers decode");
}

}  // namespace bps::server
