// Writes from the sending thread (tcp_link.hpp: a small frame sent while nothing is queued goes
// out from `send` itself, without blocking). When the socket takes only part of a frame, the
// link's strand writes the rest before anything queued behind it, so the peer reads every frame
// whole and in order; each `on_sent` runs once, in order, and never on the sending thread. A
// frame sent while the link's only I/O thread is held up reaches the peer all the same, which
// only a write from the sending thread can do.
//
// The peer is a plain socket that reads nothing until the sender is done, so the kernel's
// buffers fill: 400 frames of 60000 bytes (24 MB) are several times what loopback's buffers
// hold, and a frame boundary falling exactly on a full buffer is as likely as any other byte.

#include <asio.hpp>
#include <byteps/transport/frame_write.hpp>
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
#include <utility>
#include <vector>

#include <poll.h>
#include <sys/socket.h>

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

constexpr std::uint64_t closed_mark = ~std::uint64_t{0};

// Each on_sent's key, then `closed_mark` when the link closed, and whether an on_sent ran on
// the sending thread.
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
  void add(std::uint64_t key, bool on_sender) {
    std::lock_guard lock(mu);
    keys.push_back(key);
    on_sender_thread = on_sender_thread || on_sender;
    cv.notify_all();
  }
};

// The link's side: it reads nothing (the peer sends nothing); its close goes in the log.
class closing_receiver final : public bps::transport::receiver {
 public:
  explicit closing_receiver(sent_log& log) : log_(log) {}
  std::span<std::byte> payload_destination(const wire::header&, std::string&) override {
    return {};
  }
  void on_message(const wire::header&, std::span<std::byte>) override {}
  void on_close(const std::string&) override { log_.add(closed_mark, false); }

 private:
  sent_log& log_;
};

// `frames` keys from 0, then the close.
std::vector<std::uint64_t> keys_then_close() {
  std::vector<std::uint64_t> v;
  for (std::uint64_t k = 0; k < frames; ++k) v.push_back(k);
  v.push_back(closed_mark);
  return v;
}

// A link of `net` connected to a plain socket `peer` that reads only when told.
struct raw_peer {
  raw_peer(bps::transport::tcp& net, sent_log& log)
      : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}), peer(io) {
    link = net.connect("127.0.0.1", acceptor.local_endpoint().port(), 5s);
    acceptor.accept(peer);
    link->start(std::make_shared<closing_receiver>(log));
  }
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor;
  asio::ip::tcp::socket peer;
  std::shared_ptr<bps::transport::tcp::link> link;
};

// Whether `peer` has bytes to read within `ms` (a blocking asio read would wait for ever:
// asio polls again when SO_RCVTIMEO expires).
bool readable_within(asio::ip::tcp::socket& peer, int ms) {
  pollfd readable{peer.native_handle(), POLLIN, 0};
  return ::poll(&readable, 1, ms) == 1;
}

// Sends every payload's frame on `link` from this thread, each on_sent logged.
void send_all(bps::transport::tcp::link& link, const std::vector<std::vector<std::byte>>& payloads,
              sent_log& sent) {
  const auto sender = std::this_thread::get_id();
  for (std::uint64_t k = 0; k < payloads.size(); ++k) {
    wire::header h;
    h.type = wire::msg::push;
    h.key = k;
    link.send(h, payloads[k],
              [&sent, k, sender] { sent.add(k, std::this_thread::get_id() == sender); });
  }
}

// A link whose peer reads only when told, and what its frames carry. The members die in
// reverse: the transport stops (a failed REQUIRE stops it too) while the payloads and the log
// its callbacks use are still there.
struct sending_job {
  std::vector<std::vector<std::byte>> payloads = [] {
    std::vector<std::vector<std::byte>> v;
    for (std::uint64_t k = 0; k < frames; ++k) v.push_back(payload_of(k));
    return v;
  }();
  sent_log sent;
  bps::transport::tcp net{[] {
    bps::Config cfg;
    cfg.log = bps::log_level::error;
    return cfg;
  }()};
  raw_peer r{net, sent};
};

}  // namespace caller_writes_test

TEST_CASE(
    "tcp link: frames the sending thread wrote in part reach the peer whole and in order - "
    "each on_sent once and in order and off the sending thread",
    "[transport][tcp]") {
  using namespace caller_writes_test;
  sending_job job;
  auto& [payloads, sent, net, r] = job;
  auto& peer = r.peer;
  send_all(*r.link, payloads, sent);
  // The peer reads nothing yet: the socket is full and frames wait on the link.
  std::this_thread::sleep_for(300ms);
  CHECK(sent.count() < frames);

  std::vector<std::uint64_t> keys_read;
  std::size_t wrong_payloads = 0;
  std::vector<std::byte> payload(payload_bytes);
  for (std::size_t i = 0; i < frames; ++i) {
    wire::header_bytes head;
    REQUIRE(readable_within(peer, 10000));  // each frame's first bytes (the rest follow)
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
  REQUIRE(sent.wait(frames + 1, 10s));
  std::lock_guard lock(sent.mu);
  CHECK(sent.keys == keys_then_close());
  CHECK_FALSE(sent.on_sender_thread);
}

TEST_CASE("frame_write: what is left of a frame after each count of bytes written",
          "[transport][tcp]") {
  std::vector<std::byte> header(64), payload(100);
  const auto left = [&](std::size_t written) {
    const auto parts = bps::transport::unwritten(header, payload, written);
    return std::vector<std::pair<const void*, std::size_t>>{{parts[0].data(), parts[0].size()},
                                                             {parts[1].data(), parts[1].size()}};
  };
  using part = std::pair<const void*, std::size_t>;
  const std::byte* h = header.data();
  const std::byte* p = payload.data();
  CHECK(left(0) == std::vector<part>{{h, 64}, {p, 100}});
  CHECK(left(1) == std::vector<part>{{h + 1, 63}, {p, 100}});
  CHECK(left(63) == std::vector<part>{{h + 63, 1}, {p, 100}});
  CHECK(left(64).at(0).second == 0);
  CHECK(left(64).at(1) == part{p, 100});
  CHECK(left(65).at(0).second == 0);
  CHECK(left(65).at(1) == part{p + 1, 99});
  CHECK(left(163).at(1) == part{p + 99, 1});
  CHECK(left(164).at(1).second == 0);
  // A frame without payload.
  const auto bare = bps::transport::unwritten(header, {}, 10);
  CHECK(bare[0].size() == 54);
  CHECK(bare[1].size() == 0);
}

TEST_CASE(
    "tcp link: closed with frames written by the sending thread and frames queued - every "
    "on_sent once and in send order before on_close",
    "[transport][tcp]") {
  using namespace caller_writes_test;
  sending_job job;
  auto& [payloads, sent, net, r] = job;
  // The first frames go whole from this thread (their on_sent posted), the rest queue behind
  // the full socket; the close comes before the strand has run any of them, most likely.
  send_all(*r.link, payloads, sent);
  r.link->close();
  REQUIRE(sent.wait(frames + 1, 10s));
  std::this_thread::sleep_for(50ms);  // a second call of some on_sent would show now
  net.stop();
  std::lock_guard lock(sent.mu);
  CHECK(sent.keys == keys_then_close());
  CHECK_FALSE(sent.on_sender_thread);
}

TEST_CASE(
    "tcp link: a small frame reaches the peer while the link's only I/O thread is busy - the "
    "sending thread wrote it",
    "[transport][tcp]") {
  using namespace caller_writes_test;
  // Frame 0's on_sent holds the I/O thread until released (10 s at most, so nothing hangs).
  // Declared before the transport, which may run the callback until it stops.
  std::promise<void> running, release;
  auto released = release.get_future().share();
  sending_job job;  // one I/O thread (the default)
  auto& [payloads, sent, net, r] = job;
  wire::header h;
  h.type = wire::msg::push;
  h.key = 0;
  r.link->send(h, payloads[0], [&running, released] {
    running.set_value();
    released.wait_for(10s);
  });
  REQUIRE(running.get_future().wait_for(10s) == std::future_status::ready);
  h.key = 1;
  r.link->send(h, payloads[1], [] {});
  // The peer reads both frames now, while the I/O thread is still held: had frame 1 waited
  // for it, nothing would arrive until the release.
  std::vector<std::byte> payload(payload_bytes);
  std::vector<std::uint64_t> keys_read;
  bool payloads_right = true;
  for (int i = 0; i < 2; ++i) {
    wire::header_bytes head;
    INFO("frame " << i);
    REQUIRE(readable_within(r.peer, 2000));
    asio::read(r.peer, asio::buffer(head));
    const auto decoded = wire::decode(head, payload_bytes);
    REQUIRE(static_cast<bool>(decoded));
    REQUIRE(decoded.value.key < 2);
    asio::read(r.peer, asio::buffer(payload));
    keys_read.push_back(decoded.value.key);
    payloads_right = payloads_right && payload == payloads[decoded.value.key];
  }
  release.set_value();
  CHECK(keys_read == std::vector<std::uint64_t>{0, 1});
  CHECK(payloads_right);
  net.stop();
}
