#pragma once
// Peers that a TLS listener must refuse, and a record of what a node logged.
#include <fcntl.h>
#include <unistd.h>

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <byteps/transport/tls/tls.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "certificates.hpp"

namespace bps::test {

/// What the nodes of this process log to stderr while it lives (a transport's logger is its
/// own, with no sink a test can reach): fd 2 goes to a file, read back by `find`.
class stderr_capture {
 public:
  explicit stderr_capture(const certificates& pki) : path_(pki.path("stderr.log")) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
    if (saved_ < 0 || fd < 0) throw std::runtime_error("cannot capture stderr in " + path_);
    ::dup2(fd, 2);
    ::close(fd);
  }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;
  ~stderr_capture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
  }

  /// The first WARNING line holding `text`, waiting up to `timeout` for it; "" when none came.
  std::string find(const std::string& text,
                   std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    do {
      std::fflush(stderr);
      std::ifstream in(path_);
      for (std::string line; std::getline(in, line);)
        if (line.find(" WARNING ") != std::string::npos && line.find(text) != std::string::npos)
          return line;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < deadline);
    return "";
  }

 private:
  std::string path_;
  int saved_ = -1;
};

/// Why the link to a peer closed (waits up to 10 s).
class close_reason : public transport::receiver {
 public:
  std::span<std::byte> payload_destination(const wire::header& h, std::string& reason) override {
    buffer_.resize(h.payload_bytes);
    reason.clear();
    return buffer_;
  }
  void on_message(const wire::header&, std::span<std::byte>) override {}
  void on_close(const std::string& reason) override { closed_.set_value(reason); }
  std::string wait() {
    auto f = closed_.get_future();
    if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return "(not closed)";
    return f.get();
  }

 private:
  std::vector<std::byte> buffer_;
  std::promise<std::string> closed_;
};

/// Connects to a TLS listener with `options` (a stranger's certificate, say) and returns why the
/// connection ended: the connect's error, or the reason the link closed.
inline std::string refused_with(const transport::tls<transport::tcp>::options& options,
                                std::uint16_t port) {
  Config cfg;
  cfg.log = log_level::error;
  transport::tls<transport::tcp> net(cfg, options);
  try {
    auto link = net.connect("127.0.0.1", port, std::chrono::seconds(5));
    auto rx = std::make_shared<close_reason>();
    link->start(rx);
    return rx->wait();
  } catch (const std::exception& e) {
    return e.what();
  }
}

/// Connects with TLS but no certificate (trusting the job's CA) and returns the error that
/// ended the connection: the handshake's, or the first read's (TLS 1.3 refuses after the
/// client's handshake). Gives up after 15 s.
inline std::string refused_without_certificate(const certificates& pki, std::uint16_t port) {
  asio::io_context io;
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.load_verify_file(pki.path("ca.pem"));
  ctx.set_verify_mode(asio::ssl::verify_peer);
  asio::ssl::stream<asio::ip::tcp::socket> s(io, ctx);
  s.lowest_layer().connect({asio::ip::make_address("127.0.0.1"), port});
  std::string result = "(not closed within 15 s)";
  std::array<char, 1> byte{};
  s.async_handshake(asio::ssl::stream_base::client, [&](std::error_code ec) {
    if (ec) {
      result = ec.message();
      return;
    }
    asio::async_read(s, asio::buffer(byte), [&](std::error_code e, std::size_t) {
      result = e ? e.message() : "(read a byte)";
    });
  });
  io.run_for(std::chrono::seconds(15));
  return result;
}

/// Connects with plain TCP and sends nothing; returns the seconds until the listener closed it
/// (-1 when it did not within 15 s).
/// Seconds until the listener closes `s`, a connection that says nothing, waiting at most
/// `limit`; -1 if it was not closed by then.
inline double seconds_until_closed(asio::ip::tcp::socket& s,
                                   std::chrono::milliseconds limit = std::chrono::seconds(15)) {
  asio::io_context io;
  asio::ip::tcp::socket watched(io, asio::ip::tcp::v4(), s.release());
  const auto start = std::chrono::steady_clock::now();
  double seconds = -1;
  std::array<char, 1> byte{};
  asio::async_read(watched, asio::buffer(byte), [&](std::error_code, std::size_t) {
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  io.run_for(limit);
  return seconds;
}

inline double seconds_until_closed_silent(std::uint16_t port) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  return seconds_until_closed(s);
}

}  // namespace bps::test
