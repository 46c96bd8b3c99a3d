#include <byteps/rendezvous/scheduler_node.hpp>
#include <byteps/transport/faulty/faulty_options.hpp>
#include <byteps/transport/ipc/ipc_options.hpp>
#include <byteps/transport/tcp/tcp_options.hpp>
#include <byteps/transport/tcp/tcp_socket.hpp>
#include <byteps/transport/tls/tls_options.hpp>
#include <catch2/catch.hpp>

#include "config_env.hpp"

// A transport's options: built in code they are today's defaults; from a Config they carry the
// values Config::from_env() recorded; a decorator's carry its inner transport's.

namespace {

using tcp_options = bps::transport::tcp_options;
using ipc_tcp_options = bps::transport::ipc_options<tcp_options>;
using faulty_ipc_tcp_options = bps::transport::faulty_options<ipc_tcp_options>;
using tls_tcp_options = bps::transport::tls_options<tcp_options>;

}  // namespace

TEST_CASE("transport options built in code are the defaults", "[options]") {
  CHECK(tcp_options{}.io_threads == 1);
  CHECK(tcp_options{}.notsent_lowat == 262144);
  CHECK(tcp_options{}.poll_before_sleep == std::chrono::microseconds(200));
  CHECK(ipc_tcp_options{}.enabled);
  CHECK(ipc_tcp_options{}.inner.io_threads == 1);
  CHECK(faulty_ipc_tcp_options{}.inner.inner.io_threads == 1);
}

TEST_CASE("transport options from a Config carry its recorded values, through decorators",
          "[options]") {
  bps::Config c;
  CHECK(tcp_options::from(c).io_threads == 1);
  CHECK(ipc_tcp_options::from(c).enabled);

  c.io_threads = 3;
  c.enable_ipc = false;
  c.tcp_notsent_lowat = 0;
  c.io_poll = std::chrono::microseconds(0);
  CHECK(tcp_options::from(c).poll_before_sleep == std::chrono::microseconds(0));
  CHECK(tcp_options::from(c).io_threads == 3);
  CHECK(tcp_options::from(c).notsent_lowat == 0);
  const auto ipc = ipc_tcp_options::from(c);
  CHECK_FALSE(ipc.enabled);
  CHECK(ipc.inner.io_threads == 3);
  CHECK(ipc.inner.notsent_lowat == 0);
  const auto faulty = faulty_ipc_tcp_options::from(c);
  CHECK(faulty.plan == nullptr);  // the environment names no faults
  CHECK_FALSE(faulty.inner.enabled);
  CHECK(faulty.inner.inner.io_threads == 3);
}

TEST_CASE("a scheduler's transport sleeps at once whatever BYTEPS_IO_POLL_US says - the rest is "
          "the environment's",
          "[options]") {
  bps::Config c;
  c.io_poll = std::chrono::microseconds(500);
  c.io_threads = 2;
  const auto tcp = bps::SchedulerNode<bps::transport::tcp>::default_transport_options(c);
  CHECK(tcp.poll_before_sleep == std::chrono::microseconds(0));
  CHECK(tcp.io_threads == 2);
  const auto ipc =
      bps::SchedulerNode<bps::transport::ipc<bps::transport::tcp>>::default_transport_options(c);
  CHECK(ipc.inner.poll_before_sleep == std::chrono::microseconds(0));
  CHECK(ipc.inner.io_threads == 2);
  // A worker's and a server's transports poll as the variable says.
  CHECK(ipc_tcp_options::from(c).inner.poll_before_sleep == std::chrono::microseconds(500));
}

TEST_CASE("tcp options out of range are refused, naming the field", "[options]") {
  REQUIRE_NOTHROW(tcp_options{}.validate());
  REQUIRE_NOTHROW(tcp_options{.io_threads = 64}.validate());
  CHECK_THROWS_AS(tcp_options{.io_threads = 0}.validate(), bps::usage_error);
  CHECK_THROWS_WITH(tcp_options{.io_threads = 0}.validate(),
                    "transport::tcp::options: io_threads = 0 is not valid: expected 1 .. 64");
  CHECK_THROWS_WITH(tcp_options{.io_threads = 65}.validate(),
                    "transport::tcp::options: io_threads = 65 is not valid: expected 1 .. 64");
  REQUIRE_NOTHROW(tcp_options{.notsent_lowat = 0}.validate());
  CHECK_THROWS_WITH(tcp_options{.notsent_lowat = (std::size_t{1} << 30) + 1}.validate(),
                    "transport::tcp::options: notsent_lowat = 1073741825 is not valid: expected "
                    "0 (off) .. 1073741824");
  REQUIRE_NOTHROW(tcp_options{.poll_before_sleep = std::chrono::microseconds(0)}.validate());
  CHECK_THROWS_WITH(tcp_options{.poll_before_sleep = std::chrono::microseconds(100001)}.validate(),
                    "transport::tcp::options: poll_before_sleep = 100001 us is not valid: expected "
                    "0 .. 100000");
}

TEST_CASE("TCP_NOTSENT_LOWAT: set_notsent_lowat sets it, and tune_connection leaves a "
          "connection within the host at the kernel's default",
          "[options]") {
  asio::io_context io;
  auto acceptor = bps::transport::open_acceptor(io, "127.0.0.1", 0);
  auto lowat_of = [](asio::ip::tcp::socket& s) {
    int value = -2;
    socklen_t size = sizeof value;
    REQUIRE(::getsockopt(s.native_handle(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &value, &size) == 0);
    return value;
  };
  asio::ip::tcp::socket a(io), b(io);
  a.connect(acceptor->local_endpoint());
  acceptor->accept(b);
  const int kernel_default = lowat_of(b);
  REQUIRE(kernel_default != 65536);
  bps::transport::tune_connection(a, 65536);  // loopback: within the host
  bps::transport::tune_connection(b, 0);
  CHECK(lowat_of(a) == kernel_default);
  CHECK(lowat_of(b) == kernel_default);
  asio::ip::tcp::no_delay no_delay;
  a.get_option(no_delay);
  CHECK(no_delay.value());
  bps::transport::set_notsent_lowat(a, 65536);
  CHECK(lowat_of(a) == 65536);
}

TEST_CASE("a connection stays within the host when either end is loopback or both ends have one "
          "address",
          "[options]") {
  using asio::ip::make_address;
  using bps::transport::same_host_connection;
  CHECK(same_host_connection(make_address("127.0.0.1"), make_address("127.0.0.1")));
  CHECK(same_host_connection(make_address("10.0.0.1"), make_address("127.0.0.5")));
  CHECK(same_host_connection(make_address("::1"), make_address("::1")));
  CHECK(same_host_connection(make_address("10.0.0.1"), make_address("10.0.0.1")));
  CHECK_FALSE(same_host_connection(make_address("10.0.0.1"), make_address("10.0.0.2")));
  CHECK_FALSE(same_host_connection(make_address("fd00::1"), make_address("fd00::2")));
}

TEST_CASE(
    "tls options come from BYTEPS_TLS_CA, _CERT and _KEY through Config::from_env, and name what "
    "is unset",
    "[options][tls]") {
  config_test::clean_env guard;
  config_test::set_required();
  auto unset = tls_tcp_options::from(bps::Config::from_env());
  CHECK(unset.ca.empty());
  CHECK(unset.cert.empty());
  CHECK(unset.key.empty());
  CHECK(unset.handshake_timeout == std::chrono::milliseconds(5000));  // BYTEPS_HELLO_TIMEOUT_MS
  CHECK(unset.max_handshakes == 256);  // BYTEPS_MAX_PENDING_CONNECTIONS
  CHECK_THROWS_WITH(unset.validate(),
                    "transport::tls::options: ca (BYTEPS_TLS_CA) is not set: expected the path of "
                    "the certificate authority that signs every node in PEM");

  config_test::set("BYTEPS_TLS_CA", "/etc/job/ca.pem");
  config_test::set("BYTEPS_TLS_CERT", "/etc/job/node.pem");
  config_test::set("BYTEPS_TLS_KEY", "/etc/job/node.key");
  config_test::set("BYTEPS_IO_THREADS", "2");
  const auto c = bps::Config::from_env();
  CHECK(c.tls_ca == "/etc/job/ca.pem");
  const auto o = tls_tcp_options::from(c);
  CHECK(o.ca == "/etc/job/ca.pem");
  CHECK(o.cert == "/etc/job/node.pem");
  CHECK(o.key == "/etc/job/node.key");
  CHECK(o.inner.io_threads == 2);
  REQUIRE_NOTHROW(o.validate());  // the files are read when the transport is built

  auto no_key = o;
  no_key.key.clear();
  CHECK_THROWS_WITH(
      no_key.validate(),
      "transport::tls::options: key (BYTEPS_TLS_KEY) is not set: expected the path of "
      "this node's private key in PEM");
  auto bad_inner = o;
  bad_inner.inner.io_threads = 0;
  CHECK_THROWS_WITH(bad_inner.validate(),
                    "transport::tcp::options: io_threads = 0 is not valid: expected 1 .. 64");
}
