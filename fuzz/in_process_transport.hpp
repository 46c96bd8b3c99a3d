#pragma once
// An in-process `bps::Transport` for fuzzing a real `Server<>`: no sockets and no I/O threads.
// The fuzzer is the far end of every link and also each link's I/O thread: it hands a link a
// frame (`deliver`), which calls the server's receiver exactly as transport/tcp/tcp_link.hpp does
// (the header validated by `wire::decode` with the same frame limit, transport frames before the
// peer's proof refused, `payload_destination` before the payload, cut-through steps, then
// `on_message`; a receiver that throws or refuses closes the link). What the server sends is
// kept for the fuzzer to read (`take_sent`). A close, from either end or any thread, is carried
// out by `settle` on the fuzzer's thread, so `on_close` runs there once, after the last
// `on_message`, as the concept promises; so do the `on_sent` callbacks, never inside `send`.
//
// The link to the scheduler plays a scheduler that admits the server at once: a challenge on
// `start`, a welcome for the hello, and the job's end when the fuzzer says (`end_job`).
//
// Exceptions: a receiver may throw only byteps's named errors (`bps::error`,
// `wire::decode_error`); anything else aborts, since a real link would turn it into a dropped
// connection and hide that some code threw what it does not document.
#include <byteps/core/config.hpp>
#include <byteps/core/error.hpp>
#include <byteps/rendezvous/messages.hpp>
#include <byteps/transport/transport.hpp>
#include <byteps/wire/codec.hpp>
#include <byteps/wire/frame.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace bps::fuzzing {

[[noreturn]] inline void broken(const std::string& what) {
  std::fprintf(stderr, "fuzz_server_session: %s\n", what.c_str());
  std::abort();
}

struct sent_frame {
  wire::header header;
  std::vector<std::byte> payload;
  std::string text() const {
    return {reinterpret_cast<const char*>(payload.data()), payload.size()};
  }
};

class in_process_link {
 public:
  in_process_link(std::string peer, std::size_t max_frame, bool scheduler)
      : peer_(std::move(peer)), max_frame_(max_frame), scheduler_(scheduler) {}

  // ---- the Transport's side (the server's calls)
  void start(std::shared_ptr<transport::receiver> r) {
    receiver_ = std::move(r);
    caps_ = receiver_->capabilities();  // asked once, as a real link does
    if (scheduler_) {  // a scheduler's first frame: its challenge
      rendezvous::nonce n{};
      wire::header h;
      h.type = wire::msg::challenge;
      h.payload_bytes = n.size();
      deliver(h, std::as_bytes(std::span(n)));
    }
  }

  void send(const wire::header& h, std::span<const std::byte> payload,
            transport::sent_callback cb) {
    // The client sends its hello holding no lock of its own, and the inbox takes its own lock,
    // so answering inside send is safe here (and keeps the fuzzer free of threads).
    if (scheduler_ && h.type == wire::msg::hello) {
      rendezvous::welcome w;
      w.num_workers = num_workers;
      w.num_servers = 1;
      w.global_size = num_workers;
      w.servers = {{"127.0.0.1", 9000}};
      wire::header head;
      head.type = wire::msg::welcome;
      const auto body = rendezvous::encode(w);
      head.payload_bytes = body.size();
      deliver(head, body);
    }
    std::lock_guard lock(mu_);
    if (cb) done_.push_back(std::move(cb));  // run by settle(), never inside send
    if (close_reason_) return;               // lost, as on a closed socket
    if (!scheduler_) sent_.push_back({h, {payload.begin(), payload.end()}});
  }

  void close() { close_from(std::string("closed by this node")); }
  std::string peer() const { return peer_; }
  std::string local_host() const { return "127.0.0.1"; }

  // ---- the fuzzer's side (the far end, and the link's I/O thread)
  int num_workers = 1;  // what the scheduler's welcome says

  /// Hands the receiver one frame: `h` as the peer wrote it, then the `payload` bytes it sent,
  /// fewer than `h.payload_bytes` when the peer stopped mid-frame. False once the link is closed.
  bool deliver(const wire::header& sent, std::span<const std::byte> payload) {
    settle();
    if (!receiver_) return false;
    const auto head = wire::encode(sent);
    auto decoded = wire::decode(head, max_frame_);
    if (!decoded) return refuse("protocol error: " + decoded.reason);
    const wire::header h = decoded.value;
    if (wire::is_transport_msg(h.type) && !caps_.peer_admitted())
      return refuse("protocol error: a transport frame before its hello");
    if (wire::is_transport_msg(h.type) && !caps_.transport_frames) {
      if (payload.size() < h.payload_bytes) return refuse("the peer closed mid-frame");
      return true;  // another transport's handshake: read and dropped
    }
    std::string reason;
    std::span<std::byte> dest;
    std::size_t step = 0;
    if (!call([&] {
          dest = receiver_->payload_destination(h, reason);
          if (!dest.empty() && dest.size() == h.payload_bytes) step = caps_.progress_step(h);
        }))
      return false;
    if (dest.size() != h.payload_bytes) {
      if (reason.empty()) reason = "no place for the payload";
      return refuse("protocol error: " + reason);
    }
    const std::size_t have = std::min<std::size_t>(payload.size(), dest.size());
    if (!dest.empty() && have > 0) std::memcpy(dest.data(), payload.data(), have);
    // Cut-through: the receiver hears of each full step that leaves the frame incomplete.
    for (std::size_t got = step; step != 0 && got < dest.size() && got <= have; got += step)
      if (!call([&] { caps_.streaming->on_progress(h, got); })) return false;
    if (have < dest.size())
      return refuse("the peer closed the connection in the middle of a frame");
    if (!call([&] { receiver_->on_message(h, dest); })) return false;
    settle();
    return receiver_ != nullptr;
  }

  /// The peer closes its end.
  void peer_closes() { close_from(std::string("the peer closed the connection")); }

  /// Carries out a close asked for anywhere (on_close, once), and runs the sent callbacks.
  void settle() {
    std::vector<transport::sent_callback> done;
    std::optional<std::string> reason;
    {
      std::lock_guard lock(mu_);
      done.swap(done_);
      if (close_reason_ && receiver_) reason = close_reason_;
    }
    for (auto& cb : done) cb();
    if (reason) {
      auto rx = std::move(receiver_);  // the receiver may hold this link: break the cycle
      rx->on_close(*reason);
    }
  }

  /// What the server sent on this link since the last call.
  std::vector<sent_frame> take_sent() {
    std::lock_guard lock(mu_);
    return std::exchange(sent_, {});
  }

  bool open() const { return receiver_ != nullptr; }
  transport::receiver* receiver() const { return receiver_.get(); }
  bool peer_admitted() const { return receiver_ != nullptr && caps_.peer_admitted(); }

 private:
  void close_from(std::string reason) {
    std::lock_guard lock(mu_);
    if (!close_reason_) close_reason_ = std::move(reason);
  }

  bool refuse(std::string reason) {
    close_from(std::move(reason));
    settle();
    return false;
  }

  // As tcp_link's call_receiver: a receiver that throws closes the link. False when closed.
  template <class F>
  bool call(F&& f) {
    try {
      f();
    } catch (const wire::decode_error& e) {
      return refuse(std::string("protocol error: ") + e.what());
    } catch (const bps::error& e) {
      return refuse(std::string("protocol error: ") + e.what());
    } catch (const std::exception& e) {
      broken(std::string("a receiver threw an exception of no byteps type: ") + e.what());
    }
    std::lock_guard lock(mu_);
    return !close_reason_.has_value();
  }

  std::string peer_;
  std::size_t max_frame_;
  bool scheduler_;
  std::shared_ptr<transport::receiver> receiver_;  // the fuzzer's thread only
  transport::receiver_capabilities caps_;          // receiver_'s, asked in start()
  std::mutex mu_;                                  // guards what follows
  std::vector<sent_frame> sent_;
  std::vector<transport::sent_callback> done_;
  std::optional<std::string> close_reason_;
};

/// The transport: links the fuzzer opens to the server (`accept`), and one to the scheduler.
class in_process {
 public:
  using link = in_process_link;
  static constexpr std::string_view name = "in-process";
  struct options {
    static options from(const Config&) { return {}; }
  };

  in_process(const Config& cfg, const options&)
      : max_frame_(cfg.max_frame_bytes()), num_workers_(cfg.num_workers) {}

  std::uint16_t listen(const std::string&, std::uint16_t,
                       std::function<void(std::shared_ptr<link>)> f) {
    on_accept_ = std::move(f);
    return 9000;
  }
  std::shared_ptr<link> connect(const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds) {
    scheduler_ = std::make_shared<link>(host + ":" + std::to_string(port), max_frame_, true);
    scheduler_->num_workers = num_workers_;
    return scheduler_;
  }
  void register_memory(std::span<std::byte>) {}
  void stop() {
    auto all = std::exchange(links_, {});
    if (scheduler_) all.push_back(std::exchange(scheduler_, nullptr));
    for (auto& l : all) {
      l->close();
      l->settle();
    }
  }

  /// A connection from `peer` arrives at the server's port; the server challenges it.
  std::shared_ptr<link> accept(const std::string& peer) {
    auto l = std::make_shared<link>(peer, max_frame_, false);
    links_.push_back(l);
    on_accept_(l);
    l->settle();
    return l;
  }

  /// The scheduler says the job is over.
  void end_job() {
    wire::header h;
    h.type = wire::msg::shutdown;
    scheduler_->deliver(h, {});
  }

 private:
  std::size_t max_frame_;
  int num_workers_;
  std::function<void(std::shared_ptr<link>)> on_accept_;
  std::vector<std::shared_ptr<link>> links_;
  std::shared_ptr<link> scheduler_;
};
static_assert(Transport<in_process>);

}  // namespace bps::fuzzing
