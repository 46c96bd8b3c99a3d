#pragma once
// What the elastic-training cluster tests (test_elastic.cpp, test_elastic_async.cpp) share: a
// small cluster's Config, and a worker made by hand that pushes chosen rounds and vanishes.
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cluster.hpp"

namespace bps::test::elastic {

inline constexpr std::size_t count = 1000;  // one partition on one server

inline Config elastic_config(int workers, int min_workers) {
  Config c = test::base_config(workers, 1);
  c.min_workers = min_workers;
  c.fusion_bytes = 0;  // the hand-made worker reads its answers one frame at a time
  c.op_timeout = std::chrono::seconds(15);
  c.heartbeat_timeout = std::chrono::seconds(5);
  return c;
}

// A worker made by hand on machine `machine`: it joins like any other, pushes what `push` says
// for round 0, 1, ... of tensor `name` when told (to server `server` only), and vanishes
// without a word when told (as a crash looks: every link closes at once).
class hand_made_worker {
 public:
  hand_made_worker(const Config& cfg, int machine, int server = 0)
      : cfg_(cfg),
        net_(cfg_),
        control_(net_, cfg_),
        welcome_(control_.join(rendezvous::hello::from(cfg_, role::worker))) {
    const auto& at = welcome_.servers[static_cast<std::size_t>(server)];
    link_ = net_.connect(at.host, at.port, cfg_.connect_timeout);
    rendezvous::say_peer_hello(*link_, answers_, machine, 0, cfg_.job_token, cfg_.hello_timeout,
                               fmt::format("server {}", server));
    machine_ = machine;
  }

  // Pushes `count` floats of `value` as round `round` of `name`.
  void push(const std::string& name, std::uint64_t round, float value) {
    auto body = std::make_shared<std::vector<float>>(count, value);
    wire::header h;
    h.type = wire::msg::push;
    h.sender = static_cast<std::uint32_t>(machine_);
    h.key = tensor_key(name);
    h.part = 0;
    h.dtype = static_cast<std::uint32_t>(dtype::float32);
    h.round = round;
    h.tensor_bytes = count * sizeof(float);
    h.offset = 0;
    link_->send(h, std::as_bytes(std::span(*body)), [body] {});
  }

  // The answer to its push (the sum's first element), or the server's error text;
  // `contributors()` is then the answer's count of worker processes.
  std::string answer() {
    std::string why;
    auto f = answers_->take({wire::msg::pull_response, wire::msg::error},
                            std::chrono::steady_clock::now() + std::chrono::seconds(10), why);
    if (!f) return "no answer: " + why;
    if (f->header.type == wire::msg::error) return "error: " + f->text();
    contributors_ = f->header.sender;
    float first = 0;
    std::memcpy(&first, f->payload.data(), sizeof first);
    return fmt::format("{}", first);
  }

  std::uint32_t contributors() const { return contributors_; }

  // Failover: waits for the scheduler's word that its server was replaced and talks to the
  // replacement from then on (answers not read before are dropped).
  void follow_replacement() {
    const auto f = control_.expect(wire::msg::server_replaced,
                                   std::chrono::steady_clock::now() + std::chrono::seconds(20),
                                   "server_replaced");
    const auto moved = rendezvous::decode_server_replaced(f.payload);
    answers_ = std::make_shared<rendezvous::inbox>();
    link_ = net_.connect(moved.where.host, moved.where.port, cfg_.connect_timeout);
    rendezvous::say_peer_hello(*link_, answers_, machine_, 0, cfg_.job_token, cfg_.hello_timeout,
                               fmt::format("server {}", moved.rank));
  }

  void vanish() { net_.stop(); }

  // Says bye to the scheduler, as a worker that leaves (waits up to 5 s for it to go out).
  void leave() {
    auto sent = std::make_shared<std::promise<void>>();
    auto done = sent->get_future();
    control_.bye([sent] { sent->set_value(); });
    done.wait_for(std::chrono::seconds(5));
  }

 private:
  Config cfg_;
  transport::tcp net_;
  rendezvous::client<transport::tcp> control_;
  rendezvous::welcome welcome_;
  std::shared_ptr<transport::tcp::link> link_;
  std::shared_ptr<rendezvous::inbox> answers_ = std::make_shared<rendezvous::inbox>();
  int machine_ = 0;
  std::uint32_t contributors_ = 0;
};

}  // namespace bps::test::elastic
