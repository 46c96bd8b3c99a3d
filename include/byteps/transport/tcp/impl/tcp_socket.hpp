#pragma once
/// @file
/// The bodies of transport/tcp/tcp_socket.hpp's functions that are not templates: inline in header-only
/// mode, compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::transport {

bool same_host_connection(const asio::ip::address& local,
                          const asio::ip::address& remote) noexcept {
  return remote.is_loopback() || local.is_loopback() || local == remote;
}

void set_notsent_lowat(asio::basic_socket<asio::ip::tcp>& socket, std::size_t bytes) {
#ifdef TCP_NOTSENT_LOWAT
  const int value = static_cast<int>(bytes);
  (void)::setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &value, sizeof value);
#else
  (void)socket;
  (void)bytes;
#endif
}

void tune_connection(asio::basic_socket<asio::ip::tcp>& socket, std::size_t notsent_lowat) {
  std::error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  if (notsent_lowat == 0) return;
  std::error_code local_error, remote_error;
  const auto local = socket.local_endpoint(local_error);
  const auto remote = socket.remote_endpoint(remote_error);
  if (!local_error && !remote_error && same_host_connection(local.address(), remote.address()))
    return;
  set_notsent_lowat(socket, notsent_lowat);
}

std::shared_ptr<asio::ip::tcp::acceptor> open_acceptor(asio::io_context& io,
                                                       const std::string& host,
                                                       std::uint16_t port) {
  std::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty())
      throw communicator_error(fmt::format("cannot listen on {}:{}: cannot resolve '{}': {}", host,
                                           port, host, ec.message()));
    address = results.begin()->endpoint().address();
  }
  auto acceptor = std::make_shared<asio::ip::tcp::acceptor>(io);
  asio::ip::tcp::endpoint endpoint(address, port);
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw communicator_error(fmt::format("cannot listen on {}:{}: {}", host, port, ec.message()));
  return acceptor;
}

}  // namespace bps::transport
