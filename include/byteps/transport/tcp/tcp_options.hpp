#pragma once
/// @file
/// `bps::transport::tcp_options` (`transport::tcp::options`): the TCP transport's own knobs,
/// apart from the node's `Config`, as a transport's attributes are in Gloo
/// (`transport/tcp/attr.h`). A node takes them as its optional second constructor argument;
/// without them it uses `from(cfg)`, the values `Config::from_env()` read from the environment.

#include <fmt/core.h>

#include <chrono>
#include <cstddef>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"

namespace bps::transport {

struct tcp_options {
  static constexpr int max_io_threads = 64;

  static constexpr std::size_t max_notsent_lowat = std::size_t{1} << 30;

  /// Threads that run the transport's `asio::io_context` (BYTEPS_IO_THREADS).
  int io_threads = 1;

  /// Linux's TCP_NOTSENT_LOWAT on every connection that leaves the host (a loopback one keeps
  /// the kernel's default: `tune_connection`) (BYTEPS_TCP_NOTSENT_LOWAT): at most about
  /// this many bytes wait unsent in the kernel per socket; the rest wait in the link's queue,
  /// and a write is done (its `on_sent`, which returns the scheduler's credit) only once its
  /// bytes are near the wire. Without it the kernel takes up to its whole send buffer (4 MiB
  /// here) per socket, in the order written, so a partition the scheduler sends first can
  /// still reach its server late, behind bytes of other partitions to the same link, and the
  /// servers wait for the slowest worker's copy (docs/performance.md, "A short unsent queue per
  /// TCP socket", has the runs).
  /// Bytes in flight on the network are not bounded by it, only the unsent queue. 0: the
  /// kernel's default (no bound).
  std::size_t notsent_lowat = 262144;

  static constexpr std::chrono::microseconds max_poll_before_sleep{100000};
  /// How long an I/O thread polls its sockets after its last event before it sleeps in
  /// epoll_wait (BYTEPS_IO_POLL_US); 0: it sleeps at once. A frame that comes within it is read
  /// without a wake-up (docs/performance.md, "Polling before sleeping").
  std::chrono::microseconds poll_before_sleep{200};

  /// The values the environment gave (`Config::io_threads`, `Config::tcp_notsent_lowat`,
  /// `Config::io_poll`), so that a node built from `Config::from_env()` alone behaves as the
  /// variables say.
  static tcp_options from(const Config& cfg) {
    return {.io_threads = cfg.io_threads,
            .notsent_lowat = cfg.tcp_notsent_lowat,
            .poll_before_sleep = cfg.io_poll};
  }

  /// Throws `usage_error` naming the field; the transport calls it when constructed, since
  /// options built in code never pass through `Config::validate()`.
  void validate() const {
    if (io_threads < 1 || io_threads > max_io_threads)
      throw usage_error(
          fmt::format("transport::tcp::options: io_threads = {} is not valid: expected 1 .. {}",
                      io_threads, max_io_threads));
    if (notsent_lowat > max_notsent_lowat)
      throw usage_error(fmt::format(
          "transport::tcp::options: notsent_lowat = {} is not valid: expected 0 (off) .. {}",
          notsent_lowat, max_notsent_lowat));
    if (poll_before_sleep.count() < 0 || poll_before_sleep > max_poll_before_sleep)
      throw usage_error(fmt::format(
          "transport::tcp::options: poll_before_sleep = {} us is not valid: expected 0 .. {}",
          poll_before_sleep.count(), max_poll_before_sleep.count()));
  }
};

}  // namespace bps::transport
