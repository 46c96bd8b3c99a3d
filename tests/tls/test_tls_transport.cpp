// transport::tls<tcp> on its own: its options and files are checked when it is built, and a
// listener refuses, with a WARNING naming the peer and OpenSSL's reason, every peer that does not
// prove itself by a certificate of the job's CA; a client refuses a listener the same way.
#include <byteps/transport/tls/tls.hpp>
#include <catch2/catch.hpp>

#include "certificates.hpp"
#include "cluster.hpp"
#include "tls_peers.hpp"

using namespace bps;
using tls_tcp = transport::tls<transport::tcp>;

namespace {

tls_tcp::options member_options(const test::certificates& pki) {
  return tls_tcp::options::from(pki.member(Config{}));
}

}  // namespace

TEST_CASE(
    "options: unset files, unreadable files and a key of another certificate are usage errors "
    "naming the variable and path",
    "[tls]") {
  test::certificates pki;
  Config cfg;
  CHECK(test::message_of<usage_error>([&] { tls_tcp net(cfg); }) ==
        "transport::tls::options: ca (BYTEPS_TLS_CA) is not set: expected the path of the "
        "certificate authority that signs every node in PEM");
  auto opts = member_options(pki);
  opts.cert.clear();
  CHECK(test::message_of<usage_error>([&] { tls_tcp net(cfg, opts); }) ==
        "transport::tls::options: cert (BYTEPS_TLS_CERT) is not set: expected the path of this "
        "node's certificate in PEM");
  opts = member_options(pki);
  opts.ca = pki.path("missing-ca.pem");
  CHECK(test::message_of<usage_error>([&] { tls_tcp net(cfg, opts); }) ==
        fmt::format("BYTEPS_TLS_CA='{}' cannot be read: No such file or directory", opts.ca));
  opts = member_options(pki);
  opts.key = pki.path("stranger.key");
  CHECK(test::message_of<usage_error>([&] { tls_tcp net(cfg, opts); }) ==
        fmt::format("BYTEPS_TLS_KEY='{}' is not the private key of the certificate in "
                    "BYTEPS_TLS_CERT='{}'",
                    opts.key, opts.cert));
  opts = member_options(pki);
  opts.cert = pki.path("node.csr");  // a request, not a certificate
  CHECK(test::message_of<usage_error>([&] { tls_tcp net(cfg, opts); })
            .starts_with(fmt::format("BYTEPS_TLS_CERT='{}' holds no usable certificate (PEM): ",
                                     opts.cert)));
  // The environment's values reach the options.
  cfg.tls_ca = "a";
  cfg.tls_cert = "b";
  cfg.tls_key = "c";
  cfg.hello_timeout = std::chrono::milliseconds(1234);
  const auto from = tls_tcp::options::from(cfg);
  CHECK(from.ca == "a");
  CHECK(from.cert == "b");
  CHECK(from.key == "c");
  CHECK(from.handshake_timeout == std::chrono::milliseconds(1234));
}

TEST_CASE(
    "listener: a stranger's certificate, no certificate, plain TCP and a silent peer are "
    "refused with a WARNING naming the peer",
    "[tls]") {
  test::certificates pki;
  Config cfg;
  cfg.log = log_level::warning;
  cfg.hello_timeout = std::chrono::milliseconds(300);
  test::stderr_capture logged(pki);
  tls_tcp listener(cfg, tls_tcp::options::from(pki.member(cfg)));
  std::promise<void> accepted;
  const auto port = listener.listen("127.0.0.1", 0, [&](auto) { accepted.set_value(); });

  // A certificate of another CA, from a client that trusts ours.
  auto stranger = member_options(pki);
  stranger.cert = pki.path("stranger.pem");
  stranger.key = pki.path("stranger.key");
  CHECK(test::refused_with(stranger, port) == "connection to 127.0.0.1:" + std::to_string(port) +
                                                  " failed: tlsv1 alert unknown ca (SSL routines)");
  CHECK_THAT(logged.find("unable to get local issuer certificate"),
             Catch::Contains("WARNING tls: dropping connection from 127.0.0.1:") &&
                 Catch::Contains(": TLS handshake failed: certificate verify failed (SSL "
                                 "routines): unable to get local issuer certificate"));

  // No certificate at all.
  CHECK(test::refused_without_certificate(pki, port) ==
        "tlsv13 alert certificate required (SSL routines)");
  CHECK_THAT(logged.find("peer did not return a certificate"),
             Catch::Contains("WARNING tls: dropping connection from 127.0.0.1:") &&
                 Catch::EndsWith(": TLS handshake failed: peer did not return a certificate (SSL "
                                 "routines)"));

  // Plain TCP: a byteps frame where a TLS record belongs.
  {
    Config plain;
    plain.log = log_level::error;
    transport::tcp tcp(plain);
    auto link = tcp.connect("127.0.0.1", port, std::chrono::seconds(5));
    auto rx = std::make_shared<test::close_reason>();
    link->start(rx);
    static const std::byte hello[4] = {};
    link->send(wire::header{.type = wire::msg::hello}, hello, {});
    CHECK(rx->wait() == "connection closed by 127.0.0.1:" + std::to_string(port));
    CHECK_THAT(logged.find("wrong version number"),
               Catch::EndsWith(": TLS handshake failed: wrong version number (SSL routines)"));
  }

  // A peer that sends nothing is closed at the handshake's deadline.
  const double seconds = test::seconds_until_closed_silent(port);
  CHECK(seconds >= 0.25);
  CHECK(seconds < 5);
  CHECK_THAT(logged.find("did not finish"),
             Catch::EndsWith(": TLS handshake did not finish within 300 ms "
                             "(BYTEPS_HELLO_TIMEOUT_MS)"));
  // None of them became a link.
  CHECK(accepted.get_future().wait_for(std::chrono::milliseconds(0)) ==
        std::future_status::timeout);
}

TEST_CASE(
    "listener: handshakes in progress are bounded - for one more, the oldest is closed at once, "
    "named, and a member still gets through",
    "[tls]") {
  test::certificates pki;
  Config cfg;
  cfg.log = log_level::warning;
  test::stderr_capture logged(pki);
  auto opts = member_options(pki);
  opts.max_handshakes = 2;
  opts.handshake_timeout = std::chrono::seconds(5);
  std::promise<void> accepted;
  tls_tcp listener(cfg, opts);
  const auto port = listener.listen("127.0.0.1", 0, [&](auto) { accepted.set_value(); });
  // Two silent connections fill both places until their deadline, the first one oldest.
  asio::io_context io;
  asio::ip::tcp::socket first(io), second(io);
  first.connect({asio::ip::make_address("127.0.0.1"), port});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  second.connect({asio::ip::make_address("127.0.0.1"), port});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto first_port = first.local_endpoint().port();
  // A member connects with the limit full: it is admitted, and the oldest silent one goes.
  tls_tcp member(cfg, member_options(pki));
  const auto start = std::chrono::steady_clock::now();
  CHECK(member.connect("127.0.0.1", port, std::chrono::seconds(10)) != nullptr);
  const double connect_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(connect_seconds < 2);  // not after the silent ones' 5 s deadline
  CHECK(accepted.get_future().wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  const double seconds = test::seconds_until_closed(first);
  CHECK(seconds >= 0);
  CHECK(seconds < 2);  // not the 5 s deadline: closed for the newcomer
  CHECK_THAT(logged.find("to admit a connection"),
             Catch::Contains(fmt::format("WARNING tls: closing the TLS handshake from "
                                         "127.0.0.1:{} to admit a connection from 127.0.0.1:",
                                         first_port)) &&
                 Catch::Contains(": 2 handshakes were in progress "
                                 "(BYTEPS_MAX_PENDING_CONNECTIONS)"));
  // The younger silent one keeps its place until its own deadline.
  CHECK(test::seconds_until_closed(second, std::chrono::milliseconds(300)) < 0);
}

TEST_CASE(
    "client: a listener whose certificate our CA did not sign is a communicator_error naming "
    "it",
    "[tls]") {
  test::certificates pki;
  Config cfg;
  cfg.log = log_level::error;
  tls_tcp listener(cfg, member_options(pki));
  const auto port = listener.listen("127.0.0.1", 0, [](auto) {});
  auto opts = member_options(pki);
  opts.ca = pki.path("other-ca.pem");  // trusts only the other CA
  tls_tcp client(cfg, opts);
  CHECK(test::message_of<communicator_error>([&] {
          client.connect("127.0.0.1", port, std::chrono::seconds(5));
        }) == fmt::format("TLS handshake with 127.0.0.1:{} failed: certificate verify failed "
                          "(SSL routines): self-signed certificate in certificate chain",
                          port));
}

TEST_CASE("members exchange frames both ways", "[tls]") {
  test::certificates pki;
  Config cfg;
  cfg.log = log_level::error;
  tls_tcp a(cfg, member_options(pki)), b(cfg, member_options(pki));
  struct inbox : test::close_reason {
    std::promise<std::vector<std::byte>> got;
    std::vector<std::byte> data;
    std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
      data.resize(h.payload_bytes);
      return data;
    }
    void on_message(const wire::header&, std::span<std::byte> p) override {
      got.set_value({p.begin(), p.end()});
    }
  };
  auto at_a = std::make_shared<inbox>();
  const auto port = a.listen("127.0.0.1", 0, [&](std::shared_ptr<tls_tcp::link> l) {
    l->start(at_a);
    static std::vector<std::byte> reply(3 << 20, std::byte{7});  // several TLS records
    l->send(wire::header{.type = wire::msg::hello}, reply, {});
  });
  auto link = b.connect("127.0.0.1", port, std::chrono::seconds(5));
  auto at_b = std::make_shared<inbox>();
  link->start(at_b);
  std::vector<std::byte> sent(1000);
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<std::byte>(i * 31);
  link->send(wire::header{.type = wire::msg::hello}, sent, {});
  auto f = at_a->got.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(f.get() == sent);
  auto g = at_b->got.get_future();
  REQUIRE(g.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(g.get() == std::vector<std::byte>(3 << 20, std::byte{7}));
}
