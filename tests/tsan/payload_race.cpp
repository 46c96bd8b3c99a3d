// A payload changed by another thread while a caller's thread writes it (tcp_link.hpp: a small
// frame goes out from `send` itself, through transport/frame_write.hpp's
// write_without_blocking). The buffer must stay untouched until the frame's on_sent: this
// program breaks that on purpose, and ThreadSanitizer must say so. Its CTest test (TSan builds
// only) passes when the report comes and names write_without_blocking: nothing in
// scripts/tsan-suppressions.txt may hide a race in the send path.
//
// The other thread starts before the send and waits with a sleep, which orders nothing for
// TSan, so its write and the send's read of the same bytes are unordered, as they would be in a
// trainer that reused a gradient buffer before its push was sent.
#include <asio.hpp>
#include <byteps/transport/tcp/tcp.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

class silent_receiver final : public bps::transport::receiver {
 public:
  std::span<std::byte> payload_destination(const bps::wire::header&, std::string&) override {
    return {};
  }
  void on_message(const bps::wire::header&, std::span<std::byte>) override {}
  void on_close(const std::string&) override {}
};

}  // namespace

int main() {
  using namespace std::chrono_literals;
  bps::Config cfg;
  cfg.log = bps::log_level::error;
  bps::transport::tcp net(cfg);
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket peer(io);
  auto link = net.connect("127.0.0.1", acceptor.local_endpoint().port(), 5s);
  acceptor.accept(peer);
  link->start(std::make_shared<silent_receiver>());

  std::vector<std::byte> payload(4096, std::byte{7});
  std::thread reuser([&payload] {
    std::this_thread::sleep_for(200ms);
    payload[0] = std::byte{8};  // before on_sent could be trusted: the bug this program plays
  });
  bps::wire::header h;
  h.type = bps::wire::msg::push;
  link->send(h, payload, [] {});
  reuser.join();
  std::this_thread::sleep_for(100ms);
  net.stop();
  std::puts("payload_race: done without a report (ThreadSanitizer saw no race)");
  return 0;
}
