// A link tells whether its peer's bytes wait unread (transport::TellsUnreadBytes): a listener
// whose pending limit is full closes a silent connection before one whose hello has arrived but
// is not read yet (rendezvous/gate.hpp), which is what keeps a node in under a flood when the
// listener's thread is slower than the flood.

#include <asio.hpp>
#include <byteps/transport/faulty/faulty.hpp>
#include <byteps/transport/ipc/ipc.hpp>
#include <byteps/transport/tcp/tcp.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "../cluster/poll_until.hpp"

using namespace std::chrono_literals;

static_assert(bps::transport::TellsUnreadBytes<bps::transport::tcp::link>);
static_assert(bps::transport::TellsUnreadBytes<bps::transport::ipc<bps::transport::tcp>::link>);
static_assert(
    bps::transport::TellsUnreadBytes<bps::transport::faulty<bps::transport::tcp>::link>);

TEST_CASE("tcp link: has_unread_bytes is true once the peer's bytes wait unread, false after") {
  bps::Config cfg;
  cfg.log = bps::log_level::off;
  std::promise<std::shared_ptr<bps::transport::tcp::link>> accepted;
  bps::transport::tcp listener(cfg);
  const auto port =
      listener.listen("127.0.0.1", 0, [&](auto l) { accepted.set_value(std::move(l)); });
  asio::io_context io;
  asio::ip::tcp::socket peer(io);
  peer.connect({asio::ip::make_address("127.0.0.1"), port});
  auto future = accepted.get_future();
  REQUIRE(future.wait_for(10s) == std::future_status::ready);
  auto link = future.get();  // not started: nothing reads what the peer sends
  CHECK_FALSE(link->has_unread_bytes());
  asio::write(peer, asio::buffer("hello", 5));
  CHECK(bps::test::poll_until([&] { return link->has_unread_bytes(); }, 10s));
  // Closed locally: nothing waits to be read any more.
  link->close();
  CHECK(bps::test::poll_until([&] { return !link->has_unread_bytes(); }, 10s));
}
