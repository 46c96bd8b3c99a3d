#pragma once
/// @file
/// `bps::transport::tls_link` (`tls<tcp>::link`): one connection of `transport::tls`, the TCP
/// link's template (tcp_link.hpp) over Asio's SSL stream. The handshake is done before a link
/// is made (tls.hpp), so a link only reads and writes records: its reads decrypt straight into
/// the receiver's memory, as TCP's read into it.

#include <asio/error.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ssl/error.hpp>
#include <asio/ssl/stream.hpp>

#include "byteps/transport/tcp/tcp_link.hpp"

namespace bps::transport {

using tls_stream = asio::ssl::stream<asio::ip::tcp::socket>;

/// A TLS peer that closes without a close_notify (a process that exits, a link closed by its
/// owner) ends the stream "truncated": for a frame transport that is the peer closing, since
/// every frame carries its own length and a cut frame is reported as such.
template <>
struct stream_traits<tls_stream> {
  static bool closed_by_peer(const std::error_code& ec) {
    return ec == asio::error::eof || ec == asio::ssl::error::stream_truncated;
  }
};

using tls_link = basic_tcp_link<tls_stream>;

}  // namespace bps::transport
