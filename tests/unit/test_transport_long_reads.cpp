// A TCP link counts itself, in its transport's count, while it is in the middle of a long
// payload (`tcp_link::long_payload_bytes`), and the transport's I/O threads do not poll while
// the count is above zero (tcp_engine.hpp): the count must be one exactly while such a payload
// is half read, and zero again once it is delivered, once the peer closes in its middle, and
// for a short payload. The receiver only records on the I/O thread; Catch checks on the test
// thread.

#include <asio.hpp>
#include <byteps/transport/tcp/tcp.hpp>
#include <byteps/wire/frame.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../cluster/poll_until.hpp"

using namespace std::chrono_literals;

namespace {

namespace transport = bps::transport;
namespace wire = bps::wire;

// Takes every frame into a buffer of its own; counts the frames and records the close.
class long_read_sink final : public transport::receiver {
 public:
  transport::receiver_capabilities capabilities() override { return {}; }
  std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
    std::lock_guard lock(mu_);
    buffer_.assign(h.payload_bytes, std::byte{0});
    return buffer_;
  }
  void on_message(const wire::header&, std::span<std::byte> payload) override {
    std::lock_guard lock(mu_);
    ++messages_;
    last_bytes_ = payload.size();
  }
  void on_close(const std::string& reason) override {
    std::lock_guard lock(mu_);
    closed_ = reason;
  }
  int messages() {
    std::lock_guard lock(mu_);
    return messages_;
  }
  std::size_t last_bytes() {
    std::lock_guard lock(mu_);
    return last_bytes_;
  }
  std::string closed() {
    std::lock_guard lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  std::vector<std::byte> buffer_;
  int messages_ = 0;
  std::size_t last_bytes_ = 0;
  std::string closed_;
};

// A raw socket connected to a started link of `net`, whose frames go to `rx`.
struct long_read_peer {
  long_read_peer(transport::tcp& net, std::shared_ptr<long_read_sink> rx) : socket(io) {
    std::promise<std::shared_ptr<transport::tcp::link>> accepted;
    const auto port = net.listen("127.0.0.1", 0, [&](std::shared_ptr<transport::tcp::link> l) {
      l->start(rx);
      accepted.set_value(std::move(l));
    });
    socket.connect({asio::ip::make_address("127.0.0.1"), port});
    auto future = accepted.get_future();
    if (future.wait_for(10s) != std::future_status::ready)
      throw std::runtime_error("no connection accepted within 10 s");
    link = future.get();
  }
  void write_header(std::size_t payload_bytes) {
    wire::header h;
    h.type = wire::msg::push;
    h.key = 7;
    h.payload_bytes = payload_bytes;
    const auto bytes = wire::encode(h);
    asio::write(socket, asio::buffer(bytes.data(), bytes.size()));
  }
  void write_bytes(std::size_t n) {
    const std::vector<std::byte> bytes(n, std::byte{1});
    asio::write(socket, asio::buffer(bytes));
  }
  asio::io_context io;
  asio::ip::tcp::socket socket;
  std::shared_ptr<transport::tcp::link> link;
};

bps::Config long_read_config() {
  bps::Config c;
  c.log = bps::log_level::off;
  return c;
}

}  // namespace

TEST_CASE("tcp link: counted as reading a long payload exactly while one is half read - not "
          "after it is delivered - not for a short one") {
  constexpr std::size_t long_bytes = transport::tcp::link::long_payload_bytes;
  transport::tcp net(long_read_config());
  auto rx = std::make_shared<long_read_sink>();
  long_read_peer peer(net, rx);
  CHECK(net.long_reads_now() == 0);

  peer.write_header(long_bytes);
  peer.write_bytes(long_bytes / 2);
  REQUIRE(bps::test::poll_until([&] { return net.long_reads_now() == 1; }, 10s));
  peer.write_bytes(long_bytes - long_bytes / 2);
  REQUIRE(bps::test::poll_until([&] { return rx->messages() == 1; }, 10s));
  CHECK(rx->last_bytes() == long_bytes);
  CHECK(net.long_reads_now() == 0);

  // One byte short of long: never counted, even while half of it waits.
  peer.write_header(long_bytes - 1);
  peer.write_bytes(long_bytes / 2);
  std::this_thread::sleep_for(50ms);
  CHECK(net.long_reads_now() == 0);
  peer.write_bytes(long_bytes - 1 - long_bytes / 2);
  REQUIRE(bps::test::poll_until([&] { return rx->messages() == 2; }, 10s));
  CHECK(net.long_reads_now() == 0);
}

TEST_CASE("tcp link: a peer that closes in the middle of a long payload leaves the count at "
          "zero - and so does a link closed locally mid-payload") {
  constexpr std::size_t long_bytes = transport::tcp::link::long_payload_bytes;
  transport::tcp net(long_read_config());
  {
    auto rx = std::make_shared<long_read_sink>();
    long_read_peer peer(net, rx);
    peer.write_header(2 * long_bytes);
    peer.write_bytes(long_bytes);
    REQUIRE(bps::test::poll_until([&] { return net.long_reads_now() == 1; }, 10s));
    peer.socket.close();
    REQUIRE(bps::test::poll_until([&] { return !rx->closed().empty(); }, 10s));
    CHECK(net.long_reads_now() == 0);
    CHECK(rx->messages() == 0);
  }
  {
    auto rx = std::make_shared<long_read_sink>();
    long_read_peer peer(net, rx);
    peer.write_header(2 * long_bytes);
    peer.write_bytes(long_bytes);
    REQUIRE(bps::test::poll_until([&] { return net.long_reads_now() == 1; }, 10s));
    peer.link->close();
    REQUIRE(bps::test::poll_until([&] { return !rx->closed().empty(); }, 10s));
    CHECK(net.long_reads_now() == 0);
  }
}
