#include <byteps/transport/tcp_options.hpp>
#include <byteps/transport/ipc_options.hpp>
#include <byteps/transport/faulty_options.hpp>

#include <catch2/catch.hpp>

// A transport's options: built in code they are today's defaults; from a Config they carry the
// values Config::from_env() recorded; a decorator's carry its inner transport's.

namespace {

using tcp_options = bps::transport::tcp_options;
using ipc_tcp_options = bps::transport::ipc_options<tcp_options>;
using faulty_ipc_tcp_options = bps::transport::faulty_options<ipc_tcp_options>;

}  // namespace

TEST_CASE("transport options built in code are the defaults", "[options]") {
  CHECK(tcp_options{}.io_threads == 1);
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
  CHECK(tcp_options::from(c).io_threads == 3);
  const auto ipc = ipc_tcp_options::from(c);
  CHECK_FALSE(ipc.enabled);
  CHECK(ipc.inner.io_threads == 3);
  const auto faulty = faulty_ipc_tcp_options::from(c);
  CHECK(faulty.plan == nullptr);  // the environment names no faults
  CHECK_FALSE(faulty.inner.enabled);
  CHECK(faulty.inner.inner.io_threads == 3);
}

TEST_CASE("tcp options out of range are refused, naming the field", "[options]") {
  REQUIRE_NOTHROW(tcp_options{}.validate());
  REQUIRE_NOTHROW(tcp_options{.io_threads = 64}.validate());
  CHECK_THROWS_AS(tcp_options{.io_threads = 0}.validate(), bps::usage_error);
  CHECK_THROWS_WITH(tcp_options{.io_threads = 0}.validate(),
                    "transport::tcp::options: io_threads = 0 is not valid: expected 1 .. 64");
  CHECK_THROWS_WITH(tcp_options{.io_threads = 65}.validate(),
                    "transport::tcp::options: io_threads = 65 is not valid: expected 1 .. 64");
}
