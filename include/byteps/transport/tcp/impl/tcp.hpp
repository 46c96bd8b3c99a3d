#pragma once
/// @file
/// The bodies of transport/tcp/tcp.hpp's functions that are not templates: inline in header-only mode,
/// compiled once into byteps::compiled otherwise (core/linkage.hpp).

namespace bps::transport {

tcp::tcp(const Config& cfg, const options& opts)
    : max_frame_(cfg.max_frame_bytes()),
      notsent_lowat_(opts.notsent_lowat),
      log_(cfg.log, "tcp"),
      engine_(io_threads(opts), opts.poll_before_sleep, log_) {}

std::shared_ptr<tcp::link> tcp::adopt(asio::ip::tcp::socket socket) {
  tune_connection(socket, notsent_lowat_);
  return engine_.track(
      std::make_shared<link>(std::move(socket), max_frame_, log_, engine_.long_reads()));
}

std::uint16_t tcp::listen(const std::string& host, std::uint16_t port,
                          std::function<void(std::shared_ptr<link>)> on_accept) {
  return engine_.listeners().listen(
      host, port, [this, on_accept = std::move(on_accept)](asio::ip::tcp::socket socket) {
        tcp_listeners::hand_over(log_, [&] { on_accept(adopt(std::move(socket))); });
      });
}

std::shared_ptr<tcp::link> tcp::connect(const std::string& host, std::uint16_t port,
                                        std::chrono::milliseconds timeout) {
  return dial_until(engine_.io(), host, port, timeout,
                    [this](asio::ip::tcp::socket socket, auto /*deadline*/, std::string&) {
                      return adopt(std::move(socket));
                    });
}

void tcp::stop() {
  engine_.stop();
}

}  // namespace bps::transport
