#pragma once
/// @file
/// The bodies of worker/compressor_choice.hpp's functions that are not templates: inline in
/// header-only mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::worker {

std::shared_ptr<const compress::spec> compressor_choice::for_operation(
    const std::string& what, std::size_t bytes, std::shared_ptr<const compress::spec> asked) const {
  if (!asked) asked = default_;
  if (!asked || asked->is_none() || bytes < min_bytes_) return nullptr;
  if (failover_ && asked->declared())
    throw usage_error(fmt::format(
        "{}: compressor '{}' is decoded by the servers, which failover "
        "(BYTEPS_FAILOVER_TIMEOUT_MS > 0) does not support yet: a replacement server cannot "
        "rebuild the dead one's error feedback; use no compressor or a summable one",
        what, asked->name()));
  return asked;
}

std::shared_ptr<const compress::spec> compressor_choice::default_compressor(const Config& cfg) {
  if (cfg.compressor.empty()) return nullptr;
  try {
    return compress::by_name(compress::parse(cfg.compressor, "BYTEPS_COMPRESSOR"));
  } catch (const usage_error& e) {
    throw usage_error(fmt::format("BYTEPS_COMPRESSOR='{}': {}", cfg.compressor, e.what()));
  }
}

}  // namespace bps::worker
