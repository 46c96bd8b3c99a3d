#pragma once
/// @file
/// `bps::transport::basic_rdma<V>`: the RDMA transport over any `bps::RdmaVerbs` policy `V`.
/// `transport::rdma` (rdma.hpp) is `basic_rdma<rdma_core>`; the tests run
/// `basic_rdma<emulated_verbs>`. A link is `rdma_link<V>` (rdma_link.hpp: messages, credits,
/// registration and staging).
///
/// One progress thread per transport does everything that is not a send: it handles the
/// connection manager's events (connect, accept, errors, disconnects) and every link's
/// completions, so a link's receiver callbacks run one at a time and in order. It polls the
/// completion queues `options::poll_rounds` times when idle, then arms them and sleeps in
/// poll() on three descriptors (the completion channel, the event channel and its own wake-up
/// eventfd); with `busy_poll` it never sleeps. A failed work request, a queue pair in the error
/// state, an unknown event, a rejected connect each end that link or that attempt with a reason;
/// nothing aborts the process.
///
/// Construction opens the device (`options::device`, `port`, `gid_index`), checks that
/// RLIMIT_MEMLOCK allows at least one link's slab, and throws `communicator_error` saying how to
/// raise it when it does not.

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/log.hpp"
#include "byteps/transport/rdma/rdma_link.hpp"
#include "byteps/transport/rdma/rdma_options.hpp"
#include "byteps/transport/rdma/registry.hpp"
#include "byteps/transport/rdma/verbs.hpp"
#include "byteps/transport/transport.hpp"

namespace bps::transport {

template <RdmaVerbs V>
class basic_rdma {
 public:
  static constexpr std::string_view name = "rdma";
  using options = rdma_options<typename V::options>;
  using link = rdma_link<V>;
  using verbs_type = V;

  explicit basic_rdma(const Config& cfg) : basic_rdma(cfg, options::from(cfg)) {}
  basic_rdma(const Config& cfg, const options& opts)
      : opts_((opts.validate(), opts)),
        v_(opts.verbs),
        max_frame_(cfg.max_frame_bytes()),
        log_(cfg.log, "rdma"),
        tally_(opts.tally ? opts.tally : std::make_shared<rdma_msg::tally>()) {
    if (auto limit = v_.memlock_limit(); limit && *limit < opts_.link_bytes())
      throw communicator_error(fmt::format(
          "rdma: RLIMIT_MEMLOCK is {} bytes, but one RDMA link registers {} bytes "
          "((BYTEPS_RDMA_RX_DEPTH + BYTEPS_RDMA_START_DEPTH) x {} + 2 x "
          "BYTEPS_RDMA_STAGING_BYTES): raise the limit (`ulimit -l unlimited`; docker run "
          "--ulimit memlock=-1; systemd LimitMEMLOCK=infinity; memlock in "
          "/etc/security/limits.conf) or lower those variables",
          *limit, opts_.link_bytes(), opts_.slot_bytes));
    dev_ = v_.open_device(opts_.device, opts_.port, opts_.gid_index);
    const auto port = v_.port(dev_);
    log_.info("rdma: {} ({}) port {}: MTU {}, {}, GID index {}{}", port.device, V::name,
              port.port, port.mtu_bytes, port.ethernet ? "RoCE" : "InfiniBand", port.gid_index,
              port.roce_v2 ? " (RoCE v2)" : "");
    registry_ = std::make_unique<rdma_registry<V>>(v_, dev_);
    cc_ = v_.create_comp_channel(dev_);
    ch_ = v_.create_event_channel();
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    thread_ = std::thread([this] { run(); });
  }
  basic_rdma(const basic_rdma&) = delete;
  basic_rdma& operator=(const basic_rdma&) = delete;
  ~basic_rdma() { stop(); }

  std::uint16_t listen(const std::string& host, std::uint16_t port,
                       std::function<void(std::shared_ptr<link>)> on_accept) {
    return on_progress_thread<std::uint16_t>([&] {
      auto* id = v_.create_id(ch_, nullptr);
      try {
        const auto bound = v_.listen(id, host, port);
        listeners_[id] = std::move(on_accept);
        return bound;
      } catch (...) {
        v_.destroy_id(id);
        throw;
      }
    });
  }

  std::shared_ptr<link> connect(const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds timeout);

  /// Registers `memory` once (rdma_registry): payloads in it are written without a copy and
  /// frames land in it straight from the peer. It must stay valid until `stop()`. After `stop()`
  /// it does nothing (the device is gone).
  void register_memory(std::span<std::byte> memory) {
    std::lock_guard lock(mu_);
    if (!stopped_) registry_->add(memory);
  }
  /// Owners that register memory only for transports that use it (a server's buffer pool) ask.
  static constexpr bool registers_memory = true;

  void stop();

  /// How this transport's links have moved payloads so far: announced or sent to a cached
  /// place, written in place or through staging (rdma_messages.hpp).
  rdma_msg::counters counters() const { return tally_->snapshot(); }

  /// The verbs policy (tests reach an emulation's fabric through it).
  V& verbs() noexcept { return v_; }

 private:
  struct attempt {  // one try of connect(), owned by the progress thread until it ends
    std::string host;
    std::uint16_t port = 0;
    std::chrono::milliseconds timeout{};
    std::shared_ptr<link> l;
    std::promise<std::shared_ptr<link>> done;
    bool finished = false;
  };

  void run();
  bool poll_links();
  void handle_event(verbs::cm_event<typename V::cm_id>& e);
  void on_connect_request(verbs::cm_event<typename V::cm_id>& e);
  void start_attempt(const std::shared_ptr<attempt>& a);
  void end_attempt(typename V::cm_id* id, const std::string& error);
  std::shared_ptr<link> make_link();
  std::vector<std::byte> hello() const;
  std::optional<std::uint32_t> read_hello(const std::vector<std::byte>& data) const;
  void post(std::function<void()> task);
  void stop_links();

  // Runs f on the progress thread and returns its result (or rethrows), at once when called
  // from it.
  template <class R, class F>
  R on_progress_thread(F&& f) {
    if (std::this_thread::get_id() == thread_.get_id()) return f();
    std::packaged_task<R()> task(std::forward<F>(f));
    auto result = task.get_future();
    auto shared = std::make_shared<std::packaged_task<R()>>(std::move(task));
    post([shared] { (*shared)(); });
    if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
      throw communicator_error("rdma: the transport's progress thread did not answer in 30 s");
    return result.get();
  }

  options opts_;
  V v_;
  std::size_t max_frame_;
  logger log_;
  std::shared_ptr<rdma_msg::tally> tally_;  // shared with the links, and perhaps other nodes
  typename V::device* dev_ = nullptr;
  std::unique_ptr<rdma_registry<V>> registry_;
  typename V::comp_channel* cc_ = nullptr;
  typename V::event_channel* ch_ = nullptr;
  int wake_ = -1;
  std::thread thread_;

  std::mutex mu_;  // tasks_ and stopped_
  std::deque<std::function<void()>> tasks_;
  bool stopped_ = false;
  std::atomic<bool> exit_{false};

  // Progress thread only.
  std::map<typename V::cm_id*, std::function<void(std::shared_ptr<link>)>> listeners_;
  std::map<typename V::cm_id*, std::shared_ptr<attempt>> attempts_;
  std::map<typename V::cm_id*, std::shared_ptr<link>> accepting_;
  std::map<typename V::cm_id*, std::shared_ptr<link>> links_;
};

}  // namespace bps::transport

#include "byteps/transport/rdma/impl/basic_rdma_cm.hpp"
#include "byteps/transport/rdma/impl/basic_rdma_progress.hpp"
