#pragma once
/// @file
/// `worker::compressor_choice`: which compressor a worker's operation runs with. The one its
/// `push_pull_options` ask for, else the job's default (BYTEPS_COMPRESSOR, made with the built-ins
/// and checked when the worker is built, before it joins); none below BYTEPS_MIN_COMPRESS_BYTES;
/// and with failover on, none that the servers decode.

#include <fmt/core.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "byteps/compress/registry.hpp"
#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/linkage.hpp"

namespace bps::worker {

class compressor_choice {
 public:
  /// Throws `usage_error` naming BYTEPS_COMPRESSOR when it names no compressor the built-ins
  /// make.
  explicit compressor_choice(const Config& cfg)
      : default_(default_compressor(cfg)),
        min_bytes_(cfg.min_compress_bytes),
        failover_(cfg.failover()) {}

  /// The compressor an operation `what` on `bytes` bytes runs with: `asked`, else the default;
  /// none (null) below BYTEPS_MIN_COMPRESS_BYTES, so a small tensor keeps "none" on every call
  /// whatever it asks for. Throws `usage_error` for one the servers decode when failover is on.
  BYTEPS_DECL std::shared_ptr<const compress::spec> for_operation(
      const std::string& what, std::size_t bytes,
      std::shared_ptr<const compress::spec> asked) const;

 private:
  BYTEPS_DECL static std::shared_ptr<const compress::spec> default_compressor(const Config& cfg);

  std::shared_ptr<const compress::spec> default_;  // BYTEPS_COMPRESSOR; null for none
  std::size_t min_bytes_;
  bool failover_;
};

}  // namespace bps::worker

#if BYTEPS_INCLUDE_BODIES
#include "byteps/worker/impl/compressor_choice.hpp"
#endif
