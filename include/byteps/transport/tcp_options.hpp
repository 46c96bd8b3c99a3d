#pragma once
/// @file
/// `bps::transport::tcp_options` (`transport::tcp::options`): the TCP transport's own knobs,
/// apart from the node's `Config`, as a transport's attributes are in Gloo
/// (`transport/tcp/attr.h`). A node takes them as its optional second constructor argument;
/// without them it uses `from(cfg)`, the values `Config::from_env()` read from the environment.

#include <fmt/format.h>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"

namespace bps::transport {

struct tcp_options {
  static constexpr int max_io_threads = 64;

  /// Threads that run the transport's `asio::io_context` (BYTEPS_IO_THREADS).
  int io_threads = 1;

  /// The values the environment gave (`Config::io_threads`), so that a node built from
  /// `Config::from_env()` alone behaves as the variables say.
  static tcp_options from(const Config& cfg) { return {.io_threads = cfg.io_threads}; }

  /// Throws `usage_error` naming the field; the transport calls it when constructed, since
  /// options built in code never pass through `Config::validate()`.
  void validate() const {
    if (io_threads < 1 || io_threads > max_io_threads)
      throw usage_error(fmt::format(
          "transport::tcp::options: io_threads = {} is not valid: expected 1 .. {}", io_threads,
          max_io_threads));
  }
};

}  // namespace bps::transport
