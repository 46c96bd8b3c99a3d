#pragma once
/// @file
/// `bps::transport::tls_options<InnerOptions>` (`transport::tls<Inner>::options`): the PEM files
/// that `transport::tls` proves itself with and checks its peers against, its handshake
/// deadline, and the options of the TCP transport underneath (`inner`), as a decorator's options
/// hold its inner transport's (transport.hpp). Plain values: they need no OpenSSL, so a program
/// may fill them in a file that does not include tls.hpp.

#include <fmt/core.h>

#include <chrono>
#include <string>
#include <string_view>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"

namespace bps::transport {

template <class InnerOptions>
struct tls_options {
  /// The certificate authority (PEM) that every peer's certificate must be signed by
  /// (BYTEPS_TLS_CA). Required.
  std::string ca;
  /// This node's certificate (PEM, signed by `ca`; may hold its chain) (BYTEPS_TLS_CERT).
  std::string cert;
  /// The private key of `cert` (PEM, unencrypted) (BYTEPS_TLS_KEY).
  std::string key;
  /// How long an accepted connection may take to finish its TLS handshake before it is closed
  /// (BYTEPS_HELLO_TIMEOUT_MS, the same deadline as the hello that follows). A connecting side
  /// uses what is left of its connect timeout.
  std::chrono::milliseconds handshake_timeout{5000};
  /// Accepted connections still in their handshake at once; more are closed with a WARNING
  /// (BYTEPS_MAX_PENDING_CONNECTIONS).
  int max_handshakes = 256;
  InnerOptions inner{};

  /// The values the environment gave (`Config::tls_*`, `hello_timeout`,
  /// `max_pending_connections`, and the inner transport's own).
  static tls_options from(const Config& cfg) {
    return {.ca = cfg.tls_ca,
            .cert = cfg.tls_cert,
            .key = cfg.tls_key,
            .handshake_timeout = cfg.hello_timeout,
            .max_handshakes = cfg.max_pending_connections,
            .inner = InnerOptions::from(cfg)};
  }

  /// Throws `usage_error` naming the field and its variable. The files themselves are read,
  /// and checked, when the transport is built (tls_context.hpp).
  void validate() const {
    auto unset = [](std::string_view field, std::string_view variable, std::string_view what) {
      throw usage_error(
          fmt::format("transport::tls::options: {} ({}) is not set: expected the path of {} in PEM",
                      field, variable, what));
    };
    if (ca.empty()) unset("ca", "BYTEPS_TLS_CA", "the certificate authority that signs every node");
    if (cert.empty()) unset("cert", "BYTEPS_TLS_CERT", "this node's certificate");
    if (key.empty()) unset("key", "BYTEPS_TLS_KEY", "this node's private key");
    if (handshake_timeout.count() <= 0)
      throw usage_error(fmt::format(
          "transport::tls::options: handshake_timeout = {} ms is not valid: expected > 0",
          handshake_timeout.count()));
    if (max_handshakes < 1)
      throw usage_error(fmt::format(
          "transport::tls::options: max_handshakes = {} is not valid: expected at least 1",
          max_handshakes));
    inner.validate();
  }
};

}  // namespace bps::transport
