// Writes from the sending thread (tcp_link.hpp: a small frame sent while nothing is queued goes
// out from `send` itself, without blocking). When the socket takes only part of a frame, the
// link's strand writes the rest before anything queued behind it, so the peer reads every frame
// whole and in order; each `on_sent` runs once, in order, and never on the sending thread.
//
// The peer is a plain socket that reads nothing until the sender is done, so the kernel's
// buffers fill: 400 frames of 60000 bytes (24 MB) are several times what loopback's buffers
// hold, and a frame boundary falling exactly on a full buffer is as likely as any other byte.

#include <asio.hpp>
#include <byteps/transport/tcp.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace caller_writes_test {

namespace wire = bps::wire;

constexpr std::size_t frames = 400;
constexpr std::size_t payload_bytes = 60000;  // under the link's bound for a caller's write

std::vector<std::byte> payload_of(std::uint64_t key) {
  std::vector<std::byte> v(payload_bytes);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<std::byte>((i * 13 + (i >> 9) + key * 101) & 0xff);
  return v;
}

// The link's side: it reads nothing (the peer sends nothing); only the close matters.
class silent_receiver final : public bps::transport::receiver {
 public:
  std::span<std::byte> payload_destination(const wire::header&, std::string&) override {
    return {};
  }
  void on_message(const wire::header&, std::span<std::byte>) override {}
  void on_close(const std::string&) override {}
};

// Each on_sent's key and whether it ran on the sending thread.
struct sent_log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::uint64_t> keys;
  bool on_sender_thread = false;

  bool wait(std::size_t n, std::chrono::milliseconds within) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, within, [&] { return keys.size() >= n; });
  }
  std::size_t count() {
    std::lock_guard lock(mu);
    return keys.size();
  }
};

}  // namespace caller_writes_test

TEST_CASE(
    "tcp link: frames the sending thread wrote in part reach the peer whole and in order - "
    "each on_sent once and in order and off the sending thread",
    "[transport][tcp]") {
  using namespace caller_writes_test;
  bps::Config cfg;
  cfg.log = bps::log_level::error;
  bps::transport::tcp net(cfg);

  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  auto link = net.connect("127.0.0.1", acceptor.local_endpoint().port(), 5s);
  asio::ip::tcp::socket peer(io);
  acceptor.accept(peer);
  link->start(std::make_shared<silent_receiver>());

  std::vector<std::vector<std::byte>> payloads;
  for (std::uint64_t k = 0; k < frames; ++k) payloads.push_back(payload_of(k));
  sent_log sent;
  const auto sender = std::this_thread::get_id();
  for (std::uint64_t k = 0; k < frames; ++k) {
    wire::header h;
    h.type = wire::msg::push;
    h.key = k;
    link->send(h, payloads[k], [&sent, k, sender] {
      std::lock_guard lock(sent.mu);
      sent.keys.push_back(k);
      sent.on_sender_thread = sent.on_sender_thread || std::this_thread::get_id() == sender;
      sent.cv.notify_all();
    });
  }
  // The peer reads nothing yet: the socket is full and frames wait on the link.
  std::this_thread::sleep_for(300ms);
  CHECK(sent.count() < frames);

  std::vector<std::uint64_t> keys_read;
  std::size_t wrong_payloads = 0;
  std::vector<std::byte> payload(payload_bytes);
  for (std::size_t i = 0; i < frames; ++i) {
    wire::header_bytes head;
    asio::read(peer, asio::buffer(head));
    const auto decoded = wire::decode(head, payload_bytes);
    REQUIRE(static_cast<bool>(decoded));
    REQUIRE(decoded.value.payload_bytes == payload_bytes);
    asio::read(peer, asio::buffer(payload));
    keys_read.push_back(decoded.value.key);
    if (decoded.value.key >= frames || payload != payloads[decoded.value.key]) ++wrong_payloads;
  }
  std::vector<std::uint64_t> in_order(frames);
  for (std::uint64_t k = 0; k < frames; ++k) in_order[k] = k;
  CHECK(keys_read == in_order);
  CHECK(wrong_payloads == 0);

  REQUIRE(sent.wait(frames, 10s));
  std::this_thread::sleep_for(50ms);  // a second call of some on_sent would show now
  net.stop();
  CHECK(sent.keys == in_order);
  CHECK_FALSE(sent.on_sender_thread);
}
