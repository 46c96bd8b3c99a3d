// A peer's last words: frames a peer sent just before it went away are delivered before the
// link reports its close, even when a write to that peer fails first. The scheduler lost a
// worker's bye this way under load: it answered a heartbeat the worker had sent just before its
// bye, the write failed (the worker had closed), and the link closed before it read the bye,
// so a clean exit looked like a crash ("disconnected (... Broken pipe); the job cannot
// continue").
//
// The peer here is a plain socket, so that the test decides the order: a large write to it is
// in progress (it reads nothing), it sends two frames and resets the connection, and the
// link's receiver holds the first frame until the reset has failed the write.

#include <algorithm>
#include <asio.hpp>
#include <byteps/transport/tcp/tcp.hpp>
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

namespace last_words_test {

namespace wire = bps::wire;

// Keeps the keys of the frames it got; holds the first one until released.
class holding_receiver final : public bps::transport::receiver {
 public:
  std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
    payload_.resize(h.payload_bytes);
    return payload_;
  }
  void on_message(const wire::header& h, std::span<std::byte>) override {
    std::unique_lock lock(mu_);
    keys_.push_back(h.key);
    cv_.notify_all();
    if (keys_.size() == 1) cv_.wait(lock, [&] { return released_; });
  }
  void on_close(const std::string& reason) override {
    std::lock_guard lock(mu_);
    closed_ = reason;
    cv_.notify_all();
  }
  bool wait_first() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return !keys_.empty(); });
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool wait_closed() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return !closed_.empty(); });
  }
  std::vector<std::uint64_t> keys() {
    std::lock_guard lock(mu_);
    return keys_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::byte> payload_;
  std::vector<std::uint64_t> keys_;
  bool released_ = false;
  std::string closed_;
};

std::vector<std::byte> frame(std::uint64_t key, std::size_t payload) {
  wire::header h;
  h.type = wire::msg::push;
  h.key = key;
  h.payload_bytes = payload;
  const auto head = wire::encode(h);
  std::vector<std::byte> out(head.size() + payload, std::byte{7});
  std::copy(head.begin(), head.end(), out.begin());
  return out;
}

}  // namespace last_words_test

TEST_CASE(
    "tcp link: frames a peer sent before it reset are delivered although a write failed "
    "first, then the close",
    "[transport][tcp]") {
  using namespace last_words_test;
  bps::Config cfg;
  cfg.log = bps::log_level::error;
  bps::transport::tcp net(cfg);
  auto rx = std::make_shared<holding_receiver>();
  std::promise<std::shared_ptr<bps::transport::tcp::link>> accepted;
  const auto port = net.listen("127.0.0.1", 0, [&](std::shared_ptr<bps::transport::tcp::link> l) {
    l->start(rx);
    accepted.set_value(l);
  });

  asio::io_context io;
  asio::ip::tcp::socket peer(io);
  peer.connect({asio::ip::make_address("127.0.0.1"), port});
  auto future = accepted.get_future();
  REQUIRE(future.wait_for(5s) == std::future_status::ready);
  auto link = future.get();

  // A write the peer never reads: it stays in progress until the reset fails it.
  const std::vector<std::byte> big(std::size_t{64} << 20, std::byte{1});
  wire::header h;
  h.type = wire::msg::push;
  h.key = 99;
  link->send(h, big, {});

  // The peer's last words, then a reset (linger 0: RST instead of FIN).
  auto words = frame(1, 16);
  const auto bye = frame(2, 8);
  words.insert(words.end(), bye.begin(), bye.end());
  asio::write(peer, asio::buffer(words));
  REQUIRE(rx->wait_first());  // the link's thread now holds frame 1
  peer.set_option(asio::socket_base::linger(true, 0));
  peer.close();
  std::this_thread::sleep_for(300ms);  // the reset arrives; the write fails behind frame 1
  rx->release();

  REQUIRE(rx->wait_closed());
  CHECK(rx->keys() == std::vector<std::uint64_t>{1, 2});
  net.stop();
}
