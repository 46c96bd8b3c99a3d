#pragma once
// Test helpers for basic_rdma over the emulation: a receiver that records what one link shows
// it (on the progress thread; Catch checks on the test thread), and two transports on one
// private fabric with a connected pair of links between them.
#include <atomic>
#include <byteps/transport/rdma/basic_rdma.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "emulated_instances.hpp"
#include "emulated_verbs.hpp"

namespace bps::test {

using emu_rdma = transport::basic_rdma<emu::emulated_verbs>;
using namespace std::chrono_literals;

/// What the shared default fabric (the one every transport without a fabric of its own uses)
/// caught a transport doing against the verbs' rules.
inline std::vector<std::string> shared_fabric_violations() {
  return emu::fabric::shared_default()->violations();
}

inline std::byte pattern_byte(std::uint64_t key, std::size_t i) {
  return static_cast<std::byte>((i * 7 + (i >> 11) + key * 31) & 0xff);
}
inline std::vector<std::byte> pattern(std::uint64_t key, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = pattern_byte(key, i);
  return v;
}

struct received_frame {
  wire::header header;
  std::vector<std::byte> bytes;
  bool in_place = false;
  std::vector<std::size_t> progress;
};

// Records frames; destinations are its own buffers (a deque: they never move), or, when
// `registered` is set, slices of one arena the test registered with the transport.
class recorder final : public transport::receiver,
                       public transport::streaming_receiver,
                       public transport::cached_destinations,
                       public transport::peer_admission {
 public:
  transport::receiver_capabilities capabilities() override {
    return {.streaming = this, .cached = this, .admission = this};
  }
  std::span<std::byte> payload_destination(const wire::header& h, std::string&) override {
    std::lock_guard lock(mu_);
    frames_.emplace_back();
    frames_.back().header = h;
    if (arena_ && arena_used_ + h.payload_bytes <= arena_->size()) {
      current_ = std::span(arena_->data() + arena_used_, h.payload_bytes);
      arena_used_ += h.payload_bytes;
    } else {
      buffers_.emplace_back(h.payload_bytes);
      current_ = buffers_.back();
    }
    return current_;
  }
  std::size_t progress_step(const wire::header&) override { return step_; }
  void on_progress(const wire::header&, std::size_t bytes_in) override {
    std::lock_guard lock(mu_);
    frames_.back().progress.push_back(bytes_in);
  }
  void on_message(const wire::header&, std::span<std::byte> payload) override {
    {
      std::lock_guard lock(mu_);
      auto& f = frames_.back();
      f.in_place = payload.data() == current_.data();
      f.bytes.assign(payload.begin(), payload.end());
      ++messages_;
    }
    cv_.notify_all();
  }
  void on_close(const std::string& reason) override {
    {
      std::lock_guard lock(mu_);
      ++closes_;
      reason_ = reason;
      closed_after_messages_ = messages_;
    }
    cv_.notify_all();
  }

  bool destination_stays(const wire::header&, std::span<const std::byte>) override {
    return stays_;
  }
  bool peer_admitted() const override { return admitted_; }

  void use_arena(std::vector<std::byte>* arena) { arena_ = arena; }
  // Says its destinations stay (the sender then caches them), or its peer is not admitted yet.
  void stay(bool s) { stays_ = s; }
  void admit(bool a) { admitted_ = a; }
  void ask_progress(std::size_t step) { step_ = step; }
  bool wait_messages(std::size_t n, std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return messages_ >= n; });
  }
  bool wait_closed(std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return closes_ > 0; });
  }
  std::deque<received_frame> frames() {
    std::lock_guard lock(mu_);
    return frames_;
  }
  std::string reason() {
    std::lock_guard lock(mu_);
    return reason_;
  }
  int closes() {
    std::lock_guard lock(mu_);
    return closes_;
  }
  std::size_t messages() {
    std::lock_guard lock(mu_);
    return messages_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<received_frame> frames_;
  std::deque<std::vector<std::byte>> buffers_;
  std::span<std::byte> current_;
  std::vector<std::byte>* arena_ = nullptr;
  std::size_t arena_used_ = 0;
  std::size_t step_ = 0;
  std::atomic<bool> stays_{false}, admitted_{true};
  std::size_t messages_ = 0;
  int closes_ = 0;
  std::size_t closed_after_messages_ = 0;
  std::string reason_;
};

// Counts on_sent calls per send, and whether any ran inside send() on the sending thread.
struct sent_counter {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> calls;
  bool inside_send = false;
  static inline thread_local bool in_send = false;

  transport::sent_callback make(std::size_t i) {
    {
      std::lock_guard lock(mu);
      if (calls.size() <= i) calls.resize(i + 1);
    }
    // Notified under the lock: the test may destroy the counter as soon as wait_all returns,
    // which it cannot do before this callback has let go of the mutex.
    return [this, i] {
      std::lock_guard lock(mu);
      ++calls[i];
      inside_send = inside_send || in_send;
      cv.notify_all();
    };
  }
  bool wait_all(std::chrono::milliseconds limit = 10s) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] {
      for (int c : calls)
        if (c == 0) return false;
      return true;
    });
  }
};

inline Config quiet_config() {
  Config c;
  c.log = log_level::off;
  return c;
}

inline emu_rdma::options emu_options(std::shared_ptr<emu::fabric> net) {
  emu_rdma::options o;
  o.verbs.net = std::move(net);
  o.rx_depth = 8;
  o.start_depth = 4;
  o.slot_bytes = 512;
  o.staging_bytes = 8192;
  return o;
}

// Two transports on one fabric; `pair()` connects a client link to the server transport.
struct rdma_pair {
  explicit rdma_pair(emu_rdma::options o, const Config& cfg = quiet_config())
      : server_net(cfg, o), client_net(cfg, o) {
    port = server_net.listen("127.0.0.1", 0, [this](std::shared_ptr<emu_rdma::link> l) {
      std::lock_guard lock(mu);
      auto rx = std::make_shared<recorder>();
      rx->admit(server_admits);
      rx->stay(server_stays);
      if (server_arena != nullptr) rx->use_arena(server_arena);
      server_rx.push_back(rx);
      l->start(rx);
      accepted.push_back(l);
      cv.notify_all();
    });
  }
  ~rdma_pair() {
    client_net.stop();
    server_net.stop();
  }
  // Connects one more link; returns its index into client/accepted/*_rx.
  std::size_t connect_one() {
    auto l = client_net.connect("127.0.0.1", port, 5s);
    auto rx = std::make_shared<recorder>();
    l->start(rx);
    std::unique_lock lock(mu);
    client.push_back(l);
    client_rx.push_back(rx);
    if (!cv.wait_for(lock, 5s, [&] { return accepted.size() == client.size(); }))
      throw std::runtime_error("no connection accepted within 5 s");
    return client.size() - 1;
  }

  // How the server's next recorders behave (set before connect_one).
  std::atomic<bool> server_admits{true}, server_stays{false};
  std::atomic<std::vector<std::byte>*> server_arena{nullptr};
  emu_rdma server_net, client_net;
  std::uint16_t port = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<emu_rdma::link>> client, accepted;
  std::vector<std::shared_ptr<recorder>> client_rx, server_rx;
};

inline void send_frame(emu_rdma::link& l, std::uint64_t key, std::span<const std::byte> payload,
                       transport::sent_callback cb = {}) {
  wire::header h;
  h.type = wire::msg::push;
  h.key = key;
  sent_counter::in_send = true;
  l.send(h, payload, std::move(cb));
  sent_counter::in_send = false;
}

}  // namespace bps::test
