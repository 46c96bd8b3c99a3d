#pragma once
/// @file
/// `bps::transport::make_tls_context`: the OpenSSL context (through Asio's `ssl::context`) that
/// every connection of one `transport::tls` shares. TLS 1.2 at least, 1.3 when both sides have
/// it; this node's certificate and key; peers verified against the CA, a peer without a
/// certificate refused (`verify_peer | verify_fail_if_no_peer_cert`) on both sides, so each end
/// of a link proves itself to the other. Each file is checked here, when the transport is built,
/// so a wrong path or a key of another certificate is a `usage_error` before any connection.
///
/// Peers are not checked against a host name: nodes connect by address, and the CA is the
/// job's, so a certificate it signed is what makes a process a member of the job.

#include <fmt/core.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <asio/ssl/context.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

#include "byteps/core/error.hpp"

namespace bps::transport {

namespace tls_detail {

/// Throws `usage_error` naming `variable` and `path` when the file cannot be opened for reading.
inline void require_readable(std::string_view variable, const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw usage_error(
        fmt::format("{}='{}' cannot be read: {}", variable, path, std::strerror(errno)));
}

/// OpenSSL's reason for `ec`, and, when a certificate was refused, what was wrong with it.
inline std::string tls_reason(const std::error_code& ec, SSL* ssl) {
  std::string reason = ec.message();
  if (ssl != nullptr) {
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) reason += fmt::format(": {}", X509_verify_cert_error_string(verify));
  }
  return reason;
}

}  // namespace tls_detail

/// A context holding `ca`, `cert` and `key` (PEM paths). Throws `usage_error` naming the
/// variable (BYTEPS_TLS_CA, _CERT, _KEY) and the path of a file that cannot be read or used.
inline asio::ssl::context make_tls_context(const std::string& ca, const std::string& cert,
                                           const std::string& key) {
  tls_detail::require_readable("BYTEPS_TLS_CA", ca);
  tls_detail::require_readable("BYTEPS_TLS_CERT", cert);
  tls_detail::require_readable("BYTEPS_TLS_KEY", key);
  asio::ssl::context ctx(asio::ssl::context::tls);
  ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                  asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  std::error_code ec;
  auto refuse = [&](std::string_view variable, const std::string& path, std::string_view what) {
    throw usage_error(fmt::format("{}='{}' {}: {}", variable, path, what, ec.message()));
  };
  if (ctx.load_verify_file(ca, ec); ec)
    refuse("BYTEPS_TLS_CA", ca, "holds no usable CA certificate (PEM)");
  if (ctx.use_certificate_chain_file(cert, ec); ec)
    refuse("BYTEPS_TLS_CERT", cert, "holds no usable certificate (PEM)");
  auto mismatch = [&] {
    ERR_clear_error();
    throw usage_error(fmt::format(
        "BYTEPS_TLS_KEY='{}' is not the private key of the certificate in BYTEPS_TLS_CERT='{}'",
        key, cert));
  };
  if (ctx.use_private_key_file(key, asio::ssl::context::pem, ec); ec) {
    if (ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH)
      mismatch();
    refuse("BYTEPS_TLS_KEY", key, "holds no usable private key (PEM, unencrypted)");
  }
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) mismatch();
  ctx.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  return ctx;
}

}  // namespace bps::transport
