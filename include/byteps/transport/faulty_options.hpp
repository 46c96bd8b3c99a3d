#pragma once
/// @file
/// `bps::transport::faulty_options<InnerOptions>` (`transport::faulty<Inner>::options`): the
/// options of the transport underneath a `faulty` one.

#include "byteps/core/config.hpp"

namespace bps::transport {

template <class InnerOptions>
struct faulty_options {
  InnerOptions inner{};

  /// The inner transport's options as the environment gave them.
  static faulty_options from(const Config& cfg) { return {.inner = InnerOptions::from(cfg)}; }
};

}  // namespace bps::transport
