// transport::faulty<tcp> on bare links, before any cluster uses it: the Transport contract
// (on_sent once, never inside send; the link's order kept) under each fault it injects.
#include "faulty_cluster.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <future>

using namespace bps;
using namespace std::chrono_literals;
using bps::test::faulty_tcp;
using bps::transport::fault;
using bps::transport::fault_plan;
using bps::transport::fault_rule;
using Catch::Contains;
using clock_type = std::chrono::steady_clock;
using bps::test::seconds_since;

namespace {

// Collects what arrives on a bare link.
class collector final : public transport::receiver {
 public:
  std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
    scratch_.resize(h.payload_bytes);
    return scratch_;
  }
  void on_message(const wire::header& h, std::span<std::byte> payload) override {
    {
      std::lock_guard lock(mu_);
      frames_.push_back(h);
      payloads_.emplace_back(payload.begin(), payload.end());
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
  bool wait_frames(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return frames_.size() >= n; });
  }
  bool wait_closed(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return !closed_.empty(); });
  }
  std::vector<wire::header> frames() {
    std::lock_guard lock(mu_);
    return frames_;
  }
  std::vector<std::vector<std::byte>> payloads() {
    std::lock_guard lock(mu_);
    return payloads_;
  }
  std::string closed() {
    std::lock_guard lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::byte> scratch_;  // I/O thread only
  std::vector<wire::header> frames_;
  std::vector<std::vector<std::byte>> payloads_;
  std::string closed_;
};

// A connected pair of bare faulty<tcp> links: `out` sends, `in` collects.
struct link_pair {
  explicit link_pair(std::shared_ptr<fault_plan> plan) {
    Config cfg = test::base_config(1, 1);
    const auto opts = test::transport_options<faulty_tcp>(cfg, std::move(plan));
    a = std::make_unique<faulty_tcp>(cfg, opts);
    b = std::make_unique<faulty_tcp>(cfg, opts);
    std::promise<std::shared_ptr<faulty_tcp::link>> accepted;
    auto port = b->listen("127.0.0.1", 0, [&](std::shared_ptr<faulty_tcp::link> l) {
      l->start(in);
      accepted.set_value(l);
    });
    out = a->connect("127.0.0.1", port, 5s);
    out->start(std::make_shared<collector>());
    server_side = accepted.get_future().get();
  }
  ~link_pair() {
    a->stop();
    b->stop();
  }
  std::unique_ptr<faulty_tcp> a, b;
  std::shared_ptr<collector> in = std::make_shared<collector>();
  std::shared_ptr<faulty_tcp::link> out, server_side;
};

// Counts on_sent calls and catches one that runs inside send().
struct sent_counter {
  std::atomic<int> calls{0};
  std::atomic<bool> ran_inside_send{false};
  static bool& in_send() {  // this thread is inside send()
    thread_local bool flag = false;
    return flag;
  }
  transport::sent_callback callback() {
    return [this] {
      if (in_send()) ran_inside_send = true;
      ++calls;
    };
  }
  void send(faulty_tcp::link& l, const wire::header& h, std::span<const std::byte> payload) {
    in_send() = true;
    l.send(h, payload, callback());
    in_send() = false;
  }
  bool wait_calls(int n) {
    for (int i = 0; i < 500 && calls < n; ++i) std::this_thread::sleep_for(10ms);
    return calls == n;
  }
};

wire::header numbered(std::uint64_t n) {
  wire::header h;
  h.type = wire::msg::push;
  h.key = n;
  return h;
}

}  // namespace

TEST_CASE("faulty: delay keeps the link's order and on_sent runs once, never inside send",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto delayed = plan->add({.when = {.key = 3}, .action = fault::delay(400ms)});
  link_pair p(plan);
  sent_counter sent;
  std::vector<std::byte> payload(100, std::byte{7});
  auto start = clock_type::now();
  for (std::uint64_t i = 0; i < 10; ++i) sent.send(*p.out, numbered(i), payload);
  CHECK(seconds_since(start) < 0.3);  // send never waits for a delay
  REQUIRE(p.in->wait_frames(10, 5s));
  CHECK(seconds_since(start) >= 0.39);
  auto frames = p.in->frames();
  for (std::uint64_t i = 0; i < 10; ++i) CHECK(frames[i].key == i);
  CHECK(sent.wait_calls(10));
  CHECK_FALSE(sent.ran_inside_send);
  CHECK(plan->fired(delayed) == 1);
}

TEST_CASE("faulty: drop, duplicate and both corruptions act on the matching frame only",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  plan->add({.when = {.key = 1}, .action = fault::drop()});
  plan->add({.when = {.key = 2}, .action = fault::duplicate()});
  plan->add({.when = {.key = 3}, .action = fault::corrupt_payload(5)});
  // The Nth matching frame: let two pushes pass, then act on the third.
  auto third = plan->add({.when = {.type = wire::msg::push}, .action = fault::drop(), .skip = 2});
  link_pair p(plan);
  sent_counter sent;
  std::vector<std::byte> payload(16, std::byte{1});
  for (std::uint64_t i = 0; i < 5; ++i) sent.send(*p.out, numbered(i), payload);
  // key 0 (first push not taken by a rule), key 4 (second) pass; the third matching push is
  // key 5, dropped.
  for (std::uint64_t i = 5; i < 7; ++i) sent.send(*p.out, numbered(i), payload);
  REQUIRE(p.in->wait_frames(6, 5s));
  std::this_thread::sleep_for(50ms);
  auto frames = p.in->frames();
  auto payloads = p.in->payloads();
  std::vector<std::uint64_t> keys;
  for (auto& h : frames) keys.push_back(h.key);
  CHECK(keys == std::vector<std::uint64_t>{0, 2, 2, 3, 4, 6});
  CHECK(payloads[3][5] == std::byte{0xfe});
  CHECK(payloads[3][4] == std::byte{1});
  CHECK(payload[5] == std::byte{1});  // the caller's buffer is never written
  CHECK(plan->fired(third) == 1);
  CHECK(sent.wait_calls(7));
  CHECK_FALSE(sent.ran_inside_send);

  // A corrupted header is refused by the receiving transport, which closes the link.
  plan->add({.when = {.key = 9}, .action = fault::corrupt_header()});
  sent.send(*p.out, numbered(9), payload);
  REQUIRE(p.in->wait_closed(5s));
  CHECK_THAT(p.in->closed(), Contains("unknown message type"));
  CHECK(sent.wait_calls(8));
}

TEST_CASE("faulty: a cut closes both ends and later sends still report on_sent",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  plan->add({.when = {.key = 2}, .action = fault::cut()});
  link_pair p(plan);
  sent_counter sent;
  for (std::uint64_t i = 0; i < 5; ++i) sent.send(*p.out, numbered(i), {});
  REQUIRE(p.in->wait_closed(5s));
  CHECK(sent.wait_calls(5));
  CHECK_FALSE(sent.ran_inside_send);
  auto frames = p.in->frames();
  REQUIRE(frames.size() <= 2);
  for (std::size_t i = 0; i < frames.size(); ++i) CHECK(frames[i].key == i);
}

TEST_CASE("faulty: frames held for a delay when the transport stops are lost, on_sent once",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  plan->add({.when = {.key = 0}, .action = fault::delay(10s)});
  sent_counter sent;
  auto start = clock_type::now();
  {
    link_pair p(plan);
    for (std::uint64_t i = 0; i < 3; ++i) sent.send(*p.out, numbered(i), {});
  }
  CHECK(sent.calls == 3);
  CHECK(seconds_since(start) < 5.0);
}
