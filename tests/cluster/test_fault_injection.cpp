// Faults injected by transport::faulty<tcp> into real clusters: each must end in the exact sum or
// in a named error within a bounded time, never in a hang. The first cases check the decorator
// itself on bare links: the Transport contract (on_sent once, never inside send; order kept).
#include "faulty_cluster.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <future>

using namespace bps;
using namespace std::chrono_literals;
using bps::test::faulty_cluster;
using bps::test::faulty_comm_t;
using bps::test::faulty_tcp;
using bps::transport::fault;
using bps::transport::fault_plan;
using bps::transport::fault_rule;
using Catch::Contains;
using clock_type = std::chrono::steady_clock;
using bps::test::message_of;
using bps::test::seconds_since;

namespace {

Config quick_config(int workers, int servers) {
  Config c = test::base_config(workers, servers);
  c.connect_timeout = 5s;
  c.rendezvous_timeout = 10s;
  c.op_timeout = 20s;
  return c;
}

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

TEST_CASE("a delayed push still gives the exact sum", "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto push = plan->add({.when = {.type = wire::msg::push, .sender = 0, .part = 1},
                         .action = fault::delay(300ms),
                         .times = fault_rule::always});
  // A delayed declare holds back the pushes behind it on that link.
  auto declare = plan->add({.when = {.type = wire::msg::declare, .sender = 1},
                            .action = fault::delay(200ms),
                            .times = fault_rule::always});
  Config cfg = quick_config(2, 2);
  cfg.partition_bytes = 4096;  // 5000 floats: 5 partitions over both servers
  faulty_cluster c(cfg, plan);
  double first_round = 0;
  c.run_workers([&](faulty_comm_t& comm, int rank) {
    std::vector<float> v(5000);
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<float>(i % 97) * 0.25f + static_cast<float>(rank + round) + 0.125f;
      auto start = clock_type::now();
      comm.push_pull("delayed", std::span(v)).wait();
      if (rank == 0 && round == 0) first_round = seconds_since(start);
      for (std::size_t i = 0; i < v.size(); ++i) {
        const float expected =
            static_cast<float>(i % 97) * 0.5f + static_cast<float>(1 + 2 * round) + 0.25f;
        BPS_EXPECT(v[i] == expected, "round {} element {}: {} != {}", round, i, v[i], expected);
      }
    }
  });
  CHECK(plan->fired(push) == 3);
  CHECK(plan->fired(declare) >= 1);
  CHECK(first_round >= 0.29);
}

TEST_CASE("a duplicated push is refused by the server and fails that handle naming the tensor",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto dup =
      plan->add({.when = {.type = wire::msg::push, .sender = 0}, .action = fault::duplicate()});
  faulty_cluster c(quick_config(2, 1), plan);
  std::promise<void> refused;
  auto refused_seen = refused.get_future().share();
  std::string error;
  c.run_workers([&](faulty_comm_t& comm, int rank) {
    std::vector<float> v(10, 1.0f);
    if (rank == 0) {
      error = message_of<usage_error>([&] { comm.push_pull("dup", std::span(v)).wait(); });
      refused.set_value();
    } else {
      refused_seen.wait();  // push only after the duplicate was refused: the round is still open
      comm.push_pull("dup", std::span(v)).wait();
      BPS_EXPECT(v[0] == 2.0f, "got {}", v[0]);
    }
    comm.barrier();
    // A usage error leaves the communicator usable: the next round works on both.
    std::fill(v.begin(), v.end(), static_cast<float>(rank + 1));
    comm.push_pull("dup", std::span(v)).wait();
    BPS_EXPECT(v[9] == 3.0f, "got {}", v[9]);
  });
  CHECK(plan->fired(dup) == 1);
  CHECK_THAT(error, Contains("push_pull of 'dup'") && Contains("pushed 'dup' partition 0 twice") &&
                        Contains("worker 0"));
}

TEST_CASE("a corrupted header makes the server drop the worker, whose pending handles fail fast",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  // The last of worker 0's three pushes is spoiled, so that all three handles exist when the
  // server drops the link (corrupting the first could kill the communicator before the later
  // push_pull calls, which would then throw at the call).
  plan->add({.when = {.type = wire::msg::push, .sender = 0, .key = tensor_key("d")},
             .action = fault::corrupt_header()});
  faulty_cluster c(quick_config(2, 1), plan);  // op_timeout 20 s: the failure is no timeout
  std::vector<std::string> errors;
  std::string other;
  double took = 0;
  // Worker 0 stays in the job until worker 1 has asked: a dead communicator leaves without a bye,
  // so once worker 0 left, the scheduler would fail the job too, and which of the two reasons
  // reached worker 1 first would be a race. Every wait is bounded and every promise is kept on
  // the way out, whatever happens: a broken test fails, never hangs.
  struct keep_on_exit {
    std::promise<void>& p;
    ~keep_on_exit() { p.set_value(); }
  };
  std::promise<void> failed, asked;
  auto failed_seen = failed.get_future().share();
  auto asked_seen = asked.get_future().share();
  c.run_workers(
      [&](faulty_comm_t& comm, int rank) {
        std::vector<float> a(100, 1.0f), b(100, 1.0f), d(100, 1.0f);
        if (rank == 0) {
          {
            keep_on_exit release{failed};
            auto start = clock_type::now();
            std::vector<handle> hs{comm.push_pull("a", std::span(a)),
                                   comm.push_pull("b", std::span(b)),
                                   comm.push_pull("d", std::span(d))};
            for (auto& h : hs) errors.push_back(message_of<communicator_error>([&] { h.wait(); }));
            took = seconds_since(start);
          }
          asked_seen.wait_for(std::chrono::seconds(30));
        } else {
          keep_on_exit release{asked};
          failed_seen.wait_for(std::chrono::seconds(30));
          // The server refused worker 0's frame and dropped it: it tells the others why.
          other = message_of<communicator_error>([&] { comm.push_pull("a", std::span(a)).wait(); });
        }
      },
      /*strict=*/false);
  REQUIRE(errors.size() == 3);
  CHECK_THAT(errors[0], Contains("'a'") && Contains("lost server 0"));
  CHECK_THAT(errors[1], Contains("'b'") && Contains("lost server 0"));
  CHECK_THAT(errors[2], Contains("'d'") && Contains("lost server 0"));
  CHECK(took < 5.0);
  CHECK_THAT(other,
             Contains("server 0") && Contains("worker 0") && Contains("unknown message type"));
}

TEST_CASE("a link cut mid push_pull fails the pending handles naming the server",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto cut =
      plan->add({.when = {.type = wire::msg::push, .from = role::worker, .sender = 0, .part = 2},
                 .action = fault::cut()});
  Config cfg = quick_config(2, 1);
  cfg.partition_bytes = 4096;
  faulty_cluster c(cfg, plan);
  std::string error, small, other;
  double took = 0;
  c.run_workers(
      [&](faulty_comm_t& comm, int rank) {
        std::vector<float> big(5000, 1.0f), tiny(4, 1.0f);
        auto start = clock_type::now();
        if (rank == 0) {
          // 'tiny' first, and worker 1 never pushes it: both are pending when the cut comes
          // (a push_pull called after the link died would throw at the call instead).
          auto h2 = comm.push_pull("tiny", std::span(tiny));
          auto h1 = comm.push_pull("big", std::span(big));
          error = message_of<communicator_error>([&] { h1.wait(); });
          small = message_of<communicator_error>([&] { h2.wait(); });
          took = seconds_since(start);
        } else {
          // The server lost worker 0: what worker 1 still waits for fails too.
          other = message_of<bps::error>([&] { comm.push_pull("big", std::span(big)).wait(); });
        }
      },
      /*strict=*/false);
  CHECK(plan->fired(cut) == 1);
  CHECK_THAT(error, Contains("push_pull of 'big'") && Contains("lost server 0 at 127.0.0.1:"));
  CHECK_THAT(small, Contains("'tiny'") && Contains("lost server 0"));
  CHECK(took < 5.0);
  CHECK_THAT(other, Contains("worker 0"));
}

TEST_CASE("a link the server cuts fails the worker's handle naming the server",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  plan->add(
      {.when = {.type = wire::msg::pull_response, .from = role::server}, .action = fault::cut()});
  faulty_cluster c(quick_config(1, 1), plan);
  std::string error;
  c.run_workers(
      [&](faulty_comm_t& comm, int) {
        std::vector<double> v(64, 1.0);
        error =
            message_of<communicator_error>([&] { comm.push_pull("answer", std::span(v)).wait(); });
      },
      /*strict=*/false);
  CHECK_THAT(error, Contains("'answer'") && Contains("lost server 0 at 127.0.0.1:"));
}

TEST_CASE("a dropped push fails the handle at its deadline naming the server",
          "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  auto drop = plan->add({.when = {.type = wire::msg::push, .sender = 0}, .action = fault::drop()});
  Config cfg = quick_config(2, 1);
  cfg.op_timeout = 1000ms;
  faulty_cluster c(cfg, plan);
  std::string error, other;
  double took = 0;
  std::atomic<bool> done{false};
  c.run_workers(
      [&](faulty_comm_t& comm, int rank) {
        std::vector<float> v(10, 1.0f);
        auto start = clock_type::now();
        if (rank == 0) {
          error =
              message_of<communicator_error>([&] { comm.push_pull("lost", std::span(v)).wait(); });
          took = seconds_since(start);
          done = true;
        } else {
          other =
              message_of<communicator_error>([&] { comm.push_pull("lost", std::span(v)).wait(); });
          // A dead worker leaves without a bye, and the scheduler then fails the job: stay until
          // worker 0 has met its own deadline, which is what this test checks.
          while (!done) std::this_thread::sleep_for(10ms);
        }
      },
      /*strict=*/false);
  CHECK(plan->fired(drop) == 1);
  CHECK_THAT(error, Contains("push_pull of 'lost'") && Contains("1000 ms") &&
                        Contains("1 partition(s) from server 0 at 127.0.0.1:"));
  CHECK(took >= 0.9);
  CHECK(took < 5.0);
  CHECK_THAT(other, Contains("'lost'"));
}

TEST_CASE("a corrupted hello is refused at rendezvous naming the protocol", "[fault-injection]") {
  auto plan = std::make_shared<fault_plan>();
  plan->add({.when = {.type = wire::msg::hello, .from = role::worker},
             .action = fault::corrupt_payload(0)});
  faulty_cluster c(quick_config(1, 1), plan);
  auto m = message_of<usage_error>([&] { c.make_worker(); });
  const auto flipped = std::to_string(rendezvous::protocol_version ^ 0xffu);  // byte 0 inverted
  CHECK_THAT(m, Contains("refused") && Contains("protocol differs") && Contains(flipped));
  c.run_workers([](faulty_comm_t& comm, int) {  // the rule acted once: a worker joins now
    std::vector<std::int32_t> v(3, 5);
    comm.push_pull("after", std::span(v)).wait();
    BPS_EXPECT(v[1] == 5, "got {}", v[1]);
  });
}
