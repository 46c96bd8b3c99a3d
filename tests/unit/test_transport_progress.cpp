// Cut-through as the transports expose it (transport.hpp: progress_step, on_progress): a receiver
// that asks for a step hears of a payload's progress while it arrives, sees the pattern in the
// destination's prefix at each report, then gets one on_message with the whole exact payload. A
// receiver that asks for none, and a payload that comes whole through an ipc ring, get no reports.
// The receiver only records on the I/O thread; Catch checks on the test thread (Catch is not
// thread-safe).

#include <byteps/transport/faulty/faulty.hpp>
#include <byteps/transport/ipc/ipc.hpp>
#include <byteps/transport/tcp/tcp.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

namespace transport = bps::transport;
namespace wire = bps::wire;

constexpr std::size_t step = 4096;
constexpr std::size_t big = (std::size_t{1} << 20) + 12;  // 256 whole steps and 12 bytes

// Byte i of frame `key`'s payload: changes every 2 KiB too, so bytes landing a step off show.
std::byte pattern_byte(std::uint64_t key, std::size_t i) {
  return static_cast<std::byte>((i * 7 + (i >> 11) + key * 31) & 0xff);
}

std::vector<std::byte> pattern(std::uint64_t key, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = pattern_byte(key, i);
  return v;
}

// What one frame showed its receiver.
struct frame_record {
  wire::header header;
  std::vector<std::byte> destination;
  std::vector<std::size_t> progress;  // bytes_in of each report, in order
  bool prefixes_match = true;         // at every report, the first bytes_in were the pattern's
  bool reports_name_the_frame = true;
  int messages = 0;
  bool delivered_in_place = true;  // on_message's span is the destination given for the frame
  std::vector<std::byte> delivered;
};

// Records every frame of one link. Callbacks run on the link's I/O thread, one at a time.
class recorder final : public transport::receiver, public transport::streaming_receiver {
 public:
  explicit recorder(std::size_t asked_step, bool throw_on_progress = false)
      : asked_step_(asked_step), throw_on_progress_(throw_on_progress) {}
  transport::receiver_capabilities capabilities() override { return {.streaming = this}; }

  std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
    std::lock_guard lock(mu_);
    frames_.emplace_back();
    frames_.back().header = h;
    frames_.back().destination.resize(h.payload_bytes);
    return frames_.back().destination;
  }
  std::size_t progress_step(const wire::header&) override { return asked_step_; }
  void on_progress(const wire::header& h, std::size_t bytes_in) override {
    std::lock_guard lock(mu_);
    auto& f = frames_.back();
    f.progress.push_back(bytes_in);
    f.reports_name_the_frame = f.reports_name_the_frame && h.key == f.header.key;
    const auto expected = pattern(f.header.key, std::min(bytes_in, f.destination.size()));
    f.prefixes_match = f.prefixes_match && bytes_in <= f.destination.size() &&
                       std::memcmp(f.destination.data(), expected.data(), expected.size()) == 0;
    if (throw_on_progress_) throw std::runtime_error("this receiver refuses progress");
  }
  void on_message(const wire::header& h, std::span<std::byte> payload) override {
    {
      std::lock_guard lock(mu_);
      auto& f = frames_.back();
      ++f.messages;
      f.reports_name_the_frame = f.reports_name_the_frame && h.key == f.header.key;
      f.delivered_in_place = payload.data() == f.destination.data();
      f.delivered.assign(payload.begin(), payload.end());
      ++messages_;
    }
    cv_.notify_all();
  }
  void on_close(const std::string& reason) override {
    {
      std::lock_guard lock(mu_);
      closed_ = reason;
    }
    cv_.notify_all();
  }

  bool wait_messages(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return messages_ >= n; });
  }
  bool wait_closed() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return !closed_.empty(); });
  }
  std::deque<frame_record> frames() {
    std::lock_guard lock(mu_);
    return frames_;
  }
  std::string closed() {
    std::lock_guard lock(mu_);
    return closed_;
  }

 private:
  std::size_t asked_step_;
  bool throw_on_progress_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<frame_record> frames_;  // a deque: a destination handed out never moves
  std::size_t messages_ = 0;
  std::string closed_;
};

bps::Config quiet_config() {
  bps::Config c;
  c.log = bps::log_level::error;  // the refused-progress case logs the link it drops
  return c;
}

// A connected pair of `T` links on 127.0.0.1: `client` connects, `server` is the accepted end.
template <class T>
struct link_pair {
  link_pair(const typename T::options& opts, std::shared_ptr<recorder> server_rx,
            std::shared_ptr<recorder> client_rx)
      : server_net(quiet_config(), opts), client_net(quiet_config(), opts) {
    std::promise<std::shared_ptr<typename T::link>> accepted;
    const auto port = server_net.listen("127.0.0.1", 0, [&](std::shared_ptr<typename T::link> l) {
      l->start(server_rx);
      accepted.set_value(l);
    });
    client = client_net.connect("127.0.0.1", port, 5s);
    client->start(std::move(client_rx));
    auto future = accepted.get_future();
    if (future.wait_for(5s) != std::future_status::ready)
      throw std::runtime_error("no connection accepted within 5 s");
    server = future.get();
  }
  ~link_pair() {
    client_net.stop();
    server_net.stop();
  }
  T server_net, client_net;
  std::shared_ptr<typename T::link> client, server;
};

void send_frame(auto& link, std::uint64_t key, const std::vector<std::byte>& payload) {
  wire::header h;
  h.type = wire::msg::push;
  h.key = key;
  link.send(h, payload, {});
}

// Every multiple of `step` below `size`: what TCP reports, one read per step.
std::vector<std::size_t> steps_below(std::size_t size) {
  std::vector<std::size_t> v;
  for (std::size_t at = step; at < size; at += step) v.push_back(at);
  return v;
}

// The properties any transport keeps, then TCP's exact reports (`reports`).
void check_frame(const frame_record& f, std::uint64_t key, std::size_t size,
                 const std::vector<std::size_t>& reports) {
  CAPTURE(key, size);
  CHECK(f.header.key == key);
  std::size_t last = 0;
  for (const auto bytes_in : f.progress) {
    CHECK(bytes_in >= last + step);
    CHECK(bytes_in < size);
    last = bytes_in;
  }
  CHECK(f.progress == reports);
  CHECK(f.prefixes_match);
  CHECK(f.reports_name_the_frame);
  CHECK(f.messages == 1);
  CHECK(f.delivered_in_place);
  CHECK(f.delivered == pattern(key, size));
}

// A 1 MiB + 12 B frame, and the two sizes around one step, client to server.
template <class T>
void check_progress_in_steps(const typename T::options& opts) {
  const std::vector<std::size_t> sizes{big, step, step + 1};
  std::vector<std::vector<std::byte>> payloads;
  for (std::size_t i = 0; i < sizes.size(); ++i) payloads.push_back(pattern(i + 1, sizes[i]));
  auto in = std::make_shared<recorder>(step);
  {
    link_pair<T> pair(opts, in, std::make_shared<recorder>(step));
    for (std::size_t i = 0; i < sizes.size(); ++i) send_frame(*pair.client, i + 1, payloads[i]);
    REQUIRE(in->wait_messages(sizes.size()));
  }
  const auto frames = in->frames();
  REQUIRE(frames.size() == sizes.size());
  check_frame(frames[0], 1, big, steps_below(big));
  CHECK(frames[0].progress.size() == 256);
  check_frame(frames[1], 2, step, {});  // no larger than the step: one read, no report
  check_frame(frames[2], 3, step + 1, {step});
}

// The same frame to a receiver that asks for no progress.
template <class T>
void check_no_progress_unasked(const typename T::options& opts) {
  const auto payload = pattern(7, big);
  auto in = std::make_shared<recorder>(0);
  {
    link_pair<T> pair(opts, in, std::make_shared<recorder>(0));
    send_frame(*pair.client, 7, payload);
    REQUIRE(in->wait_messages(1));
  }
  const auto frames = in->frames();
  REQUIRE(frames.size() == 1);
  check_frame(frames[0], 7, big, {});
}

using faulty_tcp = transport::faulty<transport::tcp>;
using ipc_tcp = transport::ipc<transport::tcp>;

}  // namespace

TEST_CASE("tcp reports a payload's progress in steps then delivers it whole once",
          "[transport][tcp][progress]") {
  check_progress_in_steps<transport::tcp>({});
}

TEST_CASE("tcp reports no progress to a receiver that asks for none",
          "[transport][tcp][progress]") {
  check_no_progress_unasked<transport::tcp>({});
}

TEST_CASE("tcp closes the link when on_progress throws and delivers nothing of the frame",
          "[transport][tcp][progress]") {
  const auto payload = pattern(9, big);
  auto in = std::make_shared<recorder>(step, /*throw_on_progress=*/true);
  {
    link_pair<transport::tcp> pair({}, in, std::make_shared<recorder>(0));
    send_frame(*pair.client, 9, payload);
    REQUIRE(in->wait_closed());
  }
  CHECK(in->closed() == "protocol error: this receiver refuses progress");
  const auto frames = in->frames();
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].progress == std::vector<std::size_t>{step});
  CHECK(frames[0].prefixes_match);
  CHECK(frames[0].messages == 0);
}

TEST_CASE("faulty tcp with no faults planned passes progress through",
          "[transport][faulty][progress]") {
  check_progress_in_steps<faulty_tcp>({});
  check_no_progress_unasked<faulty_tcp>({});
}

TEST_CASE("ipc over tcp on one host reports progress for payloads on the tcp link only",
          "[transport][ipc][progress]") {
  const auto big_push = pattern(1, big);      // client to server: through the client's ring
  const auto small_push = pattern(2, 12300);  // below min_ipc_bytes: on the tcp link
  const auto big_answer = pattern(3, big);    // server to client: through the server's ring
  const auto small_answer = pattern(4, 12300);
  const auto probe = pattern(100, ipc_tcp::min_ipc_bytes);
  static_assert(12300 < ipc_tcp::min_ipc_bytes);
  auto in = std::make_shared<recorder>(step);
  auto back = std::make_shared<recorder>(step);
  std::size_t probes = 0, through_ring = 0;
  std::uint64_t client_shm = 0, server_shm = 0;
  {
    link_pair<ipc_tcp> pair({}, in, back);
    // Probes until one takes the ring: the handshake has finished. One on the tcp link gets the
    // reports of its three steps; one through the ring gets none.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (through_ring == 0 && std::chrono::steady_clock::now() < deadline) {
      send_frame(*pair.client, 100, probe);
      REQUIRE(in->wait_messages(++probes));
      if (in->frames().back().progress.empty()) ++through_ring;
    }
    REQUIRE(through_ring == 1);
    // The way back: the server offers its ring once it mapped the client's, one round trip on.
    while (!pair.server->through_shm() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    REQUIRE(pair.server->through_shm());
    send_frame(*pair.client, 1, big_push);
    send_frame(*pair.client, 2, small_push);
    send_frame(*pair.server, 3, big_answer);
    send_frame(*pair.server, 4, small_answer);
    REQUIRE(in->wait_messages(probes + 2));
    REQUIRE(back->wait_messages(2));
    // The copier counts a ring payload right after sending its header: wait for the counts.
    const auto counted = std::chrono::steady_clock::now() + 5s;
    while ((pair.client_net.payloads_through_shm() < 2 ||
            pair.server_net.payloads_through_shm() < 1) &&
           std::chrono::steady_clock::now() < counted)
      std::this_thread::sleep_for(1ms);
    client_shm = pair.client_net.payloads_through_shm();
    server_shm = pair.server_net.payloads_through_shm();
  }
  CHECK(client_shm == 2);  // the last probe and the big push
  CHECK(server_shm == 1);  // the big answer
  const auto frames = in->frames();
  REQUIRE(frames.size() == probes + 2);
  for (std::size_t i = 0; i + 1 < probes; ++i) {
    CAPTURE(i);
    check_frame(frames[i], 100, probe.size(), steps_below(probe.size()));
  }
  check_frame(frames[probes - 1], 100, probe.size(), {});
  check_frame(frames[probes], 1, big, {});
  check_frame(frames[probes + 1], 2, small_push.size(), {4096, 8192, 12288});
  const auto answers = back->frames();
  REQUIRE(answers.size() == 2);
  check_frame(answers[0], 3, big, {});
  check_frame(answers[1], 4, small_answer.size(), {4096, 8192, 12288});
}
