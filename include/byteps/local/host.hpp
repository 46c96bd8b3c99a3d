#pragma once
/// @file
/// `bps::local::host`: several CPU processes per machine (BYTEPS_LOCAL_SIZE) meet in POSIX
/// shared memory. For each push_pull every local rank copies its tensor into its slot of the
/// tensor's segment; each local rank then sums the slices it owns over all slots
/// (reduce-scatter), push_pulls those slices through the servers straight from the segment,
/// and, once every local rank's slices are back, copies the whole summed tensor out
/// (all-gather). One stage thread per process drives this without blocking the caller; it
/// sleeps on the machine's futex doorbell, so an idle job costs no CPU.
///
/// Segments are unlinked as soon as every local rank mapped them; names that a crash could
/// leave (a segment some local rank never opened) are listed in the machine's control segment
/// and unlinked by every local rank when it shuts down, also after an error.
///
/// @par Thread Safety
/// `push_pull` may be called from several threads; one operation per tensor at a time.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "byteps/core/config.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/detail/shm_segment.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/local/shm.hpp"
#include "byteps/reduce/reducer.hpp"

namespace bps::local {

class host {
 public:
  static constexpr bool is_identity = false;
  using clock = std::chrono::steady_clock;

  explicit host(const Config& cfg)
      : local_rank_(cfg.local_rank), local_size_(cfg.local_size), log_(cfg.log, "local") {}
  host(const host&) = delete;
  host& operator=(const host&) = delete;
  ~host() { shutdown(); }

  int local_rank() const noexcept { return local_rank_; }
  int local_size() const noexcept { return local_size_; }

  void attach(const cluster& c, network& net) {
    cluster_ = c;
    net_ = &net;
    log_.rename(fmt::format("worker {}.{} local", c.machine, local_rank_));
    const auto deadline = clock::now() + std::chrono::seconds(30);
    control_ = detail::shm_segment(segment_name(c.job_id, c.machine, "control"),
                                   sizeof(control_block), 0xc0417201, local_size_, deadline,
                                   "local ranks meeting");
    control_block_ = reinterpret_cast<control_block*>(control_.data());
    bell_.store(&control_block_->bell, std::memory_order_release);
    log_.info("local ranks of machine {} meet in shared memory /dev/shm{}",
              c.machine, segment_name(c.job_id, c.machine, "*"));
    stage_ = std::thread([this] { stage_loop(); });
  }

  handle push_pull(request r) {
    auto op = std::make_shared<pending>();
    op->state = std::make_shared<detail::op_state>();
    op->state->what = r.what;
    op->state->type = r.type;
    op->state->deadline = r.deadline;
    op->state->on_deadline = [this](detail::op_state&) { ring(); };
    op->req = std::move(r);
    {
      std::lock_guard lock(mu_);
      if (stopped_ || !net_)
        throw usage_error(op->req.what + ": this communicator was shut down; create a new one");
      if (!dead_.empty()) throw communicator_error("this communicator is dead: " + dead_);
      auto [it, fresh] = tensors_.try_emplace(op->req.name);
      tensor& t = it->second;
      t.admit(op->req, fresh);
      if (!t.broken.empty())
        throw usage_error(op->req.what + ": this tensor failed before (" + t.broken +
                          "); its local ranks no longer agree on its rounds");
      if (op->req.count == 0) {
        op->state->finish(nullptr);
        return handle(op->state);
      }
      t.busy = true;
      op->t = &t;
      incoming_.push_back(op);
    }
    ring();
    return handle(op->state);
  }

  void fail(const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (dead_.empty()) dead_ = why;
    }
    ring();
  }

  void shutdown() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      if (dead_.empty()) dead_ = "the communicator was shut down before it finished";
    }
    ring();
    if (stage_.joinable()) stage_.join();
    // Names some local rank may never map (the job ended early): gone now.
    if (control_block_ != nullptr) {
      const auto n = std::min<std::uint32_t>(control_block_->registered.load(),
                                             control_block::capacity);
      for (std::uint32_t i = 0; i < n; ++i)
        if (auto key = control_block_->keys[i]; key != 0)
          ::shm_unlink(tensor_segment(key).c_str());
    }
    std::lock_guard lock(mu_);
    for (auto& [name, t] : tensors_) t.segment.unlink();
    tensors_.clear();
    control_.unlink();
  }

 private:
  struct control_block {
    static constexpr std::uint32_t capacity = 16384;
    std::atomic<std::uint32_t> bell;
    std::atomic<std::uint32_t> registered;
    std::uint64_t keys[capacity];  // tensor segments created, for cleanup after a crash
  };
  struct tensor_block {
    std::atomic<std::uint64_t> arrived;   // local ranks' contributions, over all rounds
    std::atomic<std::uint64_t> finished;  // local ranks whose slices came back, all rounds
    std::atomic<std::uint32_t> failed;    // a local rank's slices failed: the tensor is done
    std::byte pad[44];
  };
  static_assert(sizeof(tensor_block) == 64);

  struct tensor : tensor_use {  // tensor_use and `broken` guarded by mu_
    std::string broken;
    std::uint64_t round = 0;  // stage thread only, from here on
    detail::shm_segment segment;
    tensor_block* block = nullptr;
    std::size_t slot_bytes = 0;
    std::byte* slot(int i) const { return segment.data() + 64 + slot_bytes * i; }
    std::byte* result(int local_size) const { return slot(local_size); }
  };

  enum class stage { open, arrive, reduce, network, gather };
  struct pending {
    request req;
    std::shared_ptr<detail::op_state> state;
    tensor* t = nullptr;
    stage at = stage::open;
    std::vector<handle> slices;
  };
  using pending_ptr = std::shared_ptr<pending>;

  void ring() {
    // fail() may come from an I/O thread while attach() is still mapping the control segment.
    if (auto* word = bell_.load(std::memory_order_acquire)) doorbell(word).ring();
  }

  std::string tensor_segment(std::uint64_t key) const {
    return segment_name(cluster_.job_id, cluster_.machine, fmt::format("{:016x}", key));
  }

  std::uint64_t target(const tensor& t) const {
    return static_cast<std::uint64_t>(local_size_) * (t.round + 1);
  }

  void stage_loop() {
    const doorbell bell(bell_.load(std::memory_order_acquire));
    std::vector<pending_ptr> active;
    std::vector<std::byte> scratch;
    for (;;) {
      const auto seen = bell.value();
      std::string dead;
      {
        std::lock_guard lock(mu_);
        for (auto& op : incoming_) active.push_back(std::move(op));
        incoming_.clear();
        dead = dead_;
        if (stopped_ && active.empty()) return;
      }
      bool progressed = false;
      auto next_deadline = clock::time_point::max();
      for (auto it = active.begin(); it != active.end();) {
        pending& op = **it;
        bool done = false;
        try {
          progressed |= advance(op, dead, scratch, done);
        } catch (const std::exception& e) {
          finish(op, std::current_exception(), e.what());
          done = true;
        }
        if (done) {
          it = active.erase(it);
          progressed = true;
        } else {
          next_deadline = std::min(next_deadline, op.req.deadline);
          ++it;
        }
      }
      if (progressed) continue;
      auto timeout = std::chrono::nanoseconds(-1);
      if (next_deadline != clock::time_point::max())
        timeout = std::max(std::chrono::nanoseconds(0), next_deadline - clock::now()) +
                  std::chrono::milliseconds(1);
      bell.wait(seen, timeout);
    }
  }

  // Moves `op` as far as it can go now; true if it moved. Sets `done` once it finished.
  bool advance(pending& op, const std::string& dead, std::vector<std::byte>& scratch,
               bool& done) {
    tensor& t = *op.t;
    const bool waiting_on_peers = op.at == stage::reduce || op.at == stage::gather;
    if (!dead.empty() && op.at != stage::network)
      throw communicator_error(op.req.what + ": " + dead);
    if (waiting_on_peers && t.block->failed.load() != 0)
      throw communicator_error(op.req.what + ": another local rank of this machine failed on "
                                             "this tensor (its log says why)");
    if (waiting_on_peers && clock::now() > op.req.deadline) give_up(op);
    switch (op.at) {
      case stage::open:
        if (!t.block) open(t, op.req);
        op.at = stage::arrive;
        return true;
      case stage::arrive: {
        std::byte* mine = t.slot(local_rank_);
        if (op.req.contributes)
          std::memcpy(mine, op.req.data, op.req.count * dtype_size(t.type));
        else
          reduce::fill_negative_zero(mine, op.req.count, t.type);
        t.block->arrived.fetch_add(1, std::memory_order_acq_rel);
        ring();
        op.at = stage::reduce;
        return true;
      }
      case stage::reduce: {
        if (t.block->arrived.load(std::memory_order_acquire) < target(t)) return false;
        start_slices(op, scratch);
        op.at = stage::network;
        return true;
      }
      case stage::network: {
        for (auto& h : op.slices)
          if (!h.ready()) return false;
        try {
          for (auto& h : op.slices) h.wait();
        } catch (...) {
          t.block->failed.store(1);
          ring();
          throw;
        }
        t.block->finished.fetch_add(1, std::memory_order_acq_rel);
        ring();
        op.at = stage::gather;
        return true;
      }
      case stage::gather:
        if (t.block->finished.load(std::memory_order_acquire) < target(t)) return false;
        std::memcpy(op.req.data, t.result(local_size_), op.req.count * dtype_size(t.type));
        ++t.round;
        finish(op, nullptr, {});
        done = true;
        return true;
    }
    return false;
  }

  void open(tensor& t, const request& r) {
    const std::uint64_t key = tensor_key(r.name);
    t.slot_bytes = (r.count * dtype_size(r.type) + 63) / 64 * 64;
    const std::size_t bytes = 64 + t.slot_bytes * static_cast<std::size_t>(local_size_ + 1);
    const std::uint64_t fingerprint =
        tensor_key(fmt::format("{} {} {}", r.count, dtype_name(r.type), local_size_));
    const auto index = control_block_->registered.fetch_add(1);
    if (index < control_block::capacity) control_block_->keys[index] = key;
    t.segment = detail::shm_segment(tensor_segment(key), bytes, fingerprint, local_size_,
                                    r.deadline, r.what);
    t.block = reinterpret_cast<tensor_block*>(t.segment.data());
  }

  // Sums this rank's slices over every local rank's slot, then sends them to the servers.
  void start_slices(pending& op, std::vector<std::byte>& scratch) {
    tensor& t = *op.t;
    const auto esize = dtype_size(t.type);
    const auto [first, last] = owned_slices(local_rank_, local_size_, cluster_.slices);
    for (int s = first; s < last; ++s) {
      const auto [begin, end] = slice_range(op.req.count, s, cluster_.slices);
      std::vector<const std::byte*> inputs;
      for (int l = 0; l < local_size_; ++l) inputs.push_back(t.slot(l) + begin * esize);
      std::byte* out = t.result(local_size_) + begin * esize;
      reduce::sum_of(out, inputs, end - begin, t.type, scratch);
      auto h = net_->push_pull(slice_name(op.req.name, s),
                               fmt::format("{} (slice {} of {})", op.req.what, s, cluster_.slices),
                               out, end - begin, t.type, op.req.opts);
      h.when_done([this] { ring(); });
      op.slices.push_back(std::move(h));
    }
  }

  [[noreturn]] void give_up(pending& op) {
    const tensor& t = *op.t;
    const bool arriving = op.at == stage::reduce;
    const auto have = (arriving ? t.block->arrived : t.block->finished).load();
    const auto behind = target(t) - std::min(have, target(t));
    auto why = fmt::format(
        "{} did not finish within its deadline (BYTEPS_OP_TIMEOUT_MS): {} of the {} local ranks "
        "of machine {} {}. Does every local rank call it?",
        op.req.what, behind, local_size_, cluster_.machine,
        arriving ? "have not called it" : "have not got their slices back");
    net_->fail(why);
    throw communicator_error(why);
  }

  void finish(pending& op, std::exception_ptr e, const std::string& why) {
    {
      std::lock_guard lock(mu_);
      op.t->busy = false;
      if (e && op.at != stage::open && op.at != stage::arrive) op.t->broken = why;
    }
    op.state->finish(std::move(e));
  }

  int local_rank_;
  int local_size_;
  logger log_;
  cluster cluster_;
  network* net_ = nullptr;
  detail::shm_segment control_;
  control_block* control_block_ = nullptr;
  std::atomic<std::atomic<std::uint32_t>*> bell_{nullptr};  // the machine's doorbell word
  std::mutex mu_;
  std::unordered_map<std::string, tensor> tensors_;  // node-based: pending ops point into it
  std::deque<pending_ptr> incoming_;
  std::string dead_;
  bool stopped_ = false;
  std::thread stage_;
};

static_assert(LocalCollective<host>);

}  // namespace bps::local
