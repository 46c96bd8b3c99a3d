// With the timeline on, a node's join returns only once its first clock probes were answered,
// even when the scheduler answers them after the welcome (a real scheduler reads each link one
// frame at a time, so the last node to join always gets its welcome first). A short job could
// otherwise write its timeline before its clock offset to the scheduler was ever measured.
// Here the scheduler is made by hand, so that the order is certain: welcome first, answers late.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "cluster.hpp"

using namespace bps;

namespace {

// A scheduler's end of one link that welcomes the node at once and answers its clock probes
// only when `answer_probes` is called.
class late_answers final : public transport::receiver {
 public:
  std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
    scratch_.resize(h.payload_bytes);
    return scratch_;
  }
  void on_message(const wire::header& h, std::span<std::byte>) override {
    if (h.type == wire::msg::hello) {
      rendezvous::welcome w;
      w.num_workers = 1;
      w.num_servers = 1;
      w.global_size = 1;
      w.job_id = 1;
      w.servers = {rendezvous::address{"127.0.0.1", 1}};
      auto body = std::make_shared<std::vector<std::byte>>(rendezvous::encode(w));
      wire::header r;
      r.type = wire::msg::welcome;
      link->send(r, *body, [body] {});
      return;
    }
    if (h.type == wire::msg::heartbeat && h.round != 0) {
      std::lock_guard lock(mu_);
      probes_.push_back(h.round);
      cv_.notify_all();
    }
  }
  void on_close(const std::string&) override {}

  // Waits for `n` probes (10 s at most), then answers each with this side's clock.
  std::size_t answer_probes(std::size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return probes_.size() >= n; });
    for (auto sent : probes_) {
      wire::header a;
      a.type = wire::msg::heartbeat;
      a.round = sent;
      a.offset = static_cast<std::uint64_t>(detail::steady_ns());
      link->send(a, {}, {});
    }
    return probes_.size();
  }

  std::shared_ptr<transport::tcp::link> link;

 private:
  std::vector<std::byte> scratch_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::uint64_t> probes_;
};

}  // namespace

TEST_CASE("with the timeline on, join waits for the answers to its clock probes",
          "[trace][rendezvous]") {
  Config cfg = test::base_config(1, 1);
  cfg.trace_on = true;
  transport::tcp scheduler_net(cfg);
  auto ends = std::make_shared<late_answers>();
  std::promise<void> accepted;
  cfg.scheduler_port = scheduler_net.listen("127.0.0.1", 0, [&](auto l) {
    ends->link = l;
    l->start(ends);
    rendezvous::hello_gate::send_challenge(*l, rendezvous::pending_hello(l->peer(), {}));
    accepted.set_value();
  });
  constexpr auto late = std::chrono::milliseconds(400);
  std::size_t answered = 0;
  std::thread scheduler_side([&] {
    accepted.get_future().wait();
    std::this_thread::sleep_for(late);  // the welcome went long ago
    answered = ends->answer_probes(3);
  });
  transport::tcp node_net(cfg);
  const auto start = std::chrono::steady_clock::now();
  rendezvous::client<transport::tcp> control(node_net, cfg);
  auto welcome = control.join(rendezvous::hello::from(cfg, role::worker));
  const auto took = std::chrono::steady_clock::now() - start;
  scheduler_side.join();
  CHECK(welcome.num_servers == 1);
  CHECK(answered >= 3);
  CHECK(control.clock_offset().samples >= 3);
  CHECK(took >= late);
  node_net.stop();
  scheduler_net.stop();
}
