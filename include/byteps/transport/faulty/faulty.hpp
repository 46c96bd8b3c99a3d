#pragma once
/// @file
/// `bps::transport::faulty<Inner>`: a transport decorator that injects faults into the frames a
/// node sends, for tests and for anyone who wants to see how byteps behaves when the network
/// misbehaves. It satisfies `bps::Transport` whenever `Inner` does, so every node type takes it
/// where it takes the real transport:
///
///   using net = bps::transport::faulty<bps::transport::tcp>;
///   auto plan = std::make_shared<bps::transport::fault_plan>();
///   plan->add({.when = {.type = bps::wire::msg::push, .sender = 0},
///              .action = bps::transport::fault::delay(std::chrono::milliseconds(200))});
///   auto opts = net::options::from(cfg);  // the inner transport's, as the environment says
///   opts.plan = plan;                       // the nodes given `opts` consult `plan`
///   using comm = bps::Communicator<net, bps::local::none, bps::partition::by_bytes,
///                                  bps::schedule::fifo>;
///   comm c(cfg, opts);
///
/// @par How a transport composes
/// A transport is a value type built from `const Config&` and its own `options`, with a nested
/// `link` type; nothing in byteps names a concrete transport. So a decorator is an ordinary
/// class template that owns an `Inner`, built with the `inner` member of its own options (so one
/// value configures the whole stack), forwards `listen`/`connect`/`register_memory`/`stop` to
/// it, and wraps each `Inner::link` in its own `link` that forwards `start`/`close`/`peer` and
/// intercepts `send`.
/// Received frames go straight from the inner link to the node's receiver (no copy, no extra
/// hop); only outgoing frames pass through the decorator. A research transport (compression,
/// encryption, tracing, a simulated slow network) is written the same way: keep the concept's
/// contract (below) and `static_assert(bps::Transport<your_transport<tcp>>)`.
///
/// @par Faults
/// Each outgoing frame is matched against the rules of a shared `fault_plan`, in the order they
/// were added; the first rule that matches and has not used up its `times` decides:
/// - `drop`: the frame is never sent (the peer waits for it).
/// - `delay(d)`: the frame leaves `d` later. The link stays ordered, as links must: frames sent
///   behind a delayed frame wait behind it (head-of-line blocking, as on a slow network).
///   Delays run on the decorator's own timer thread; `send` never blocks.
/// - `duplicate`: the frame is sent twice, back to back.
/// - `corrupt_header`: the top bit of the header's type field is flipped, so the peer's
///   `wire::decode` refuses the frame as an unknown message type and closes the link. (The
///   decorator sits above the encoder: the inner transport writes magic, version and
///   payload_bytes itself, so the type field is the part of the header it can spoil.)
/// - `corrupt_payload(at)`: byte `at` (modulo the payload size) of a copy of the payload is
///   inverted; the caller's buffer is never written. A frame without payload goes out intact.
/// - `cut`: the link is closed at this frame, which is lost with every later one; both ends see
///   the link close.
///
/// @par Contract kept
/// `on_sent` runs exactly once per `send` and never inside `send`: a dropped or cut frame's
/// callback runs on the timer thread; a duplicated frame's runs once, after both copies left; a
/// delayed frame's runs when the inner transport sent it. Frames still held for a delay when the
/// transport stops are lost, and their callbacks run then. After `stop()`, frames pass to the
/// inner transport unchanged (so its contract for closed links applies).
///
/// @par Where the plan comes from
/// From `options::plan` (faulty_options.hpp), read once, in the constructor; a null plan is
/// replaced by an empty one of the transport's own (no faults). The test owns the plan and hands
/// it, in the options, to the nodes that should see it: several clusters with different plans
/// can run at once in one process, and no global or thread-local slot is involved.
///
/// @par Thread Safety
/// `fault_plan` may be changed from any thread while frames flow. Rule predicates run under the
/// plan's mutex on the sending thread: keep them quick and never call the plan from one.

#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/timer_thread.hpp"
#include "byteps/transport/faulty/fault_plan.hpp"
#include "byteps/transport/faulty/faulty_options.hpp"
#include "byteps/transport/transport.hpp"
#include "byteps/wire/frame.hpp"

namespace bps::transport {

template <Transport Inner>
class faulty {
 public:
  static constexpr std::string_view name = "faulty";
  using options = faulty_options<typename Inner::options>;
  class link;
  using inner_type = Inner;

  /// With the options the environment gave (`options::from(cfg)`): no faults.
  explicit faulty(const Config& cfg) : faulty(cfg, options::from(cfg)) {}
  faulty(const Config& cfg, const options& opts)
      : plan_(opts.plan),
        from_(cfg.node_role),
        log_(cfg.log, "faulty"),
        timer_(std::make_shared<detail::timer_thread>()),
        inner_(cfg, opts.inner) {
    if (!plan_) plan_ = std::make_shared<fault_plan>();
  }
  faulty(const faulty&) = delete;
  faulty& operator=(const faulty&) = delete;
  ~faulty() { stop(); }

  std::uint16_t listen(const std::string& host, std::uint16_t port,
                       std::function<void(std::shared_ptr<link>)> on_accept) {
    return inner_.listen(host, port,
                         [this, on_accept = std::move(on_accept)](
                             std::shared_ptr<typename Inner::link> l) { on_accept(wrap(std::move(l))); });
  }

  std::shared_ptr<link> connect(const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds timeout) {
    return wrap(inner_.connect(host, port, timeout));
  }

  void register_memory(std::span<std::byte> memory) { inner_.register_memory(memory); }

  /// Loses the frames still held for a delay (their on_sent run), then stops the inner
  /// transport. Idempotent.
  void stop() {
    timer_->stop();
    inner_.stop();
  }

  /// The plan this transport consults (the options', or its own empty one).
  const std::shared_ptr<fault_plan>& plan() const noexcept { return plan_; }
  Inner& inner() noexcept { return inner_; }

 private:
  std::shared_ptr<link> wrap(std::shared_ptr<typename Inner::link> l) {
    return std::make_shared<link>(std::move(l), plan_, timer_, from_, log_);
  }

  std::shared_ptr<fault_plan> plan_;
  role from_;
  logger log_;
  std::shared_ptr<detail::timer_thread> timer_;
  Inner inner_;  // last: destroyed (its threads already joined by stop) before the rest
};

template <Transport Inner>
class faulty<Inner>::link : public std::enable_shared_from_this<link> {
 public:
  using clock = std::chrono::steady_clock;
  using inner_link = typename Inner::link;

  link(std::shared_ptr<inner_link> inner, std::shared_ptr<fault_plan> plan,
       std::weak_ptr<detail::timer_thread> timer, role from, const logger& log)
      : inner_(std::move(inner)),
        plan_(std::move(plan)),
        timer_(std::move(timer)),
        from_(from),
        log_(log) {}

  void start(std::shared_ptr<receiver> r) { inner_->start(std::move(r)); }

  void send(const wire::header& h, std::span<const std::byte> payload, sent_callback on_sent) {
    std::unique_lock lock(mu_);
    const std::string peer(inner_->peer());
    const fault f = plan_->decide(outgoing_frame{h, payload, from_, peer, sent_++});
    if (f.action != fault::kind::pass)
      log_.info("injecting {} into a {} frame (key {:#x} part {} round {}) to {}",
                fault_name(f.action), wire::msg_name(h.type), h.key, h.part, h.round, peer);
    if (f.action == fault::kind::delay || !held_.empty() || flushing_) {
      // Hold it, and everything behind it, so that the link stays ordered.
      const auto due = std::max(last_due_, clock::now() + f.wait);
      last_due_ = due;
      const bool schedule = held_.empty() && !flushing_;
      held_.push_back(held{h, payload, std::move(on_sent), f, due});
      if (!schedule) return;
      flushing_ = true;  // until the flush is posted, later frames queue behind this one
      lock.unlock();
      if (post_flush(due)) return;
      // Stopped: nothing can wait any more. Pass what is held on as it is, in order.
      for (;;) {
        held item;
        {
          std::lock_guard relock(mu_);
          if (held_.empty()) {
            flushing_ = false;
            return;
          }
          item = std::move(held_.front());
          held_.pop_front();
        }
        inner_->send(item.header, item.payload, std::move(item.on_sent));
      }
    }
    lock.unlock();
    apply(h, payload, std::move(on_sent), f, /*on_timer_thread=*/false);
  }

  void close() { inner_->close(); }
  std::string peer() const { return std::string(inner_->peer()); }
  std::string local_host() const { return std::string(inner_->local_host()); }
  /// The inner link's answer (transport::TellsUnreadBytes).
  bool has_unread_bytes() { return transport::has_unread_bytes(*inner_); }
  const std::shared_ptr<inner_link>& inner() const noexcept { return inner_; }

 private:
  struct held {
    wire::header header;
    std::span<const std::byte> payload;
    sent_callback on_sent;
    fault action;
    clock::time_point due;
  };

  bool post_flush(clock::time_point due) {
    auto timer = timer_.lock();
    return timer && timer->post_at(due, [self = this->shared_from_this()](bool cancelled) {
             self->flush(cancelled);
           });
  }

  // Timer thread: sends, in order, the held frames that are due.
  void flush(bool cancelled) {
    for (;;) {
      held item;
      {
        std::unique_lock lock(mu_);
        if (held_.empty()) {
          flushing_ = false;
          return;
        }
        if (!cancelled && held_.front().due > clock::now()) {
          flushing_ = false;
          const auto due = held_.front().due;
          lock.unlock();
          if (post_flush(due)) return;
          cancelled = true;  // the timer is stopping: what is still held is lost
          continue;
        }
        item = std::move(held_.front());
        held_.pop_front();
        flushing_ = true;
      }
      if (cancelled) {
        if (item.on_sent) item.on_sent();
        continue;
      }
      if (item.action.action == fault::kind::delay) item.action = fault::pass();
      apply(item.header, item.payload, std::move(item.on_sent), item.action,
            /*on_timer_thread=*/true);
    }
  }

  void apply(const wire::header& h, std::span<const std::byte> payload, sent_callback on_sent,
             const fault& f, bool on_timer_thread) {
    // After a cut nothing more leaves: the inner link closes asynchronously, and a gathered
    // write could otherwise still carry frames sent after the cut (tcp_link.hpp).
    if (cut_.load(std::memory_order_acquire))
      return lose(h, payload, std::move(on_sent), on_timer_thread);
    switch (f.action) {
      case fault::kind::pass:
      case fault::kind::delay:
        return inner_->send(h, payload, std::move(on_sent));
      case fault::kind::drop:
        return lose(h, payload, std::move(on_sent), on_timer_thread);
      case fault::kind::cut:
        cut_.store(true, std::memory_order_release);
        inner_->close();
        return lose(h, payload, std::move(on_sent), on_timer_thread);
      case fault::kind::duplicate: {
        auto left = std::make_shared<std::atomic<int>>(2);
        auto done = std::make_shared<sent_callback>(std::move(on_sent));
        auto one_sent = [left, done] {
          if (left->fetch_sub(1) == 1 && *done) (*done)();
        };
        inner_->send(h, payload, one_sent);
        return inner_->send(h, payload, one_sent);
      }
      case fault::kind::corrupt_header: {
        wire::header bad = h;
        bad.type = static_cast<wire::msg>(static_cast<std::uint16_t>(h.type) ^ 0x8000u);
        return inner_->send(bad, payload, std::move(on_sent));
      }
      case fault::kind::corrupt_payload: {
        if (payload.empty()) return inner_->send(h, payload, std::move(on_sent));
        auto copy = std::make_shared<std::vector<std::byte>>(payload.begin(), payload.end());
        (*copy)[f.at % copy->size()] ^= std::byte{0xff};
        return inner_->send(h, *copy, [copy, on_sent = std::move(on_sent)] {
          if (on_sent) on_sent();
        });
      }
    }
  }

  // The frame is lost; its on_sent must still run once, and not inside send().
  void lose(const wire::header& h, std::span<const std::byte> payload, sent_callback on_sent,
            bool on_timer_thread) {
    if (!on_sent) return;
    if (on_timer_thread) return on_sent();
    auto timer = timer_.lock();
    auto deferred = std::make_shared<sent_callback>(std::move(on_sent));
    if (timer && timer->post_at(clock::now(), [deferred](bool) { (*deferred)(); })) return;
    // Stopped: no thread of ours is left to run it. The inner transport's contract covers a
    // send after stop, so the frame goes to it unchanged.
    inner_->send(h, payload, std::move(*deferred));
  }

  std::shared_ptr<inner_link> inner_;
  std::shared_ptr<fault_plan> plan_;
  std::weak_ptr<detail::timer_thread> timer_;
  role from_;
  logger log_;
  std::mutex mu_;
  std::deque<held> held_;  // frames waiting for a delay, in send order
  clock::time_point last_due_{};
  bool flushing_ = false;  // the timer thread is sending held frames: newer ones queue behind
  std::atomic<bool> cut_{false};  // a cut fired: every later frame is lost
  std::uint64_t sent_ = 0;
};

}  // namespace bps::transport
