#pragma once
/// @file
/// `bps::local::nccl`: the GPUs of one machine, one process per GPU (BYTEPS_LOCAL_RANK of
/// BYTEPS_LOCAL_SIZE), exchange device buffers as BytePS does:
///
///   1. reduce-scatter among the machine's GPUs (NCCL), so that local rank l holds the
///      machine's sum of the slices it owns (`owned_slices`);
///   2. copy of that run of slices to pinned host memory;
///   3. push_pull of each owned slice through the servers (`network::push_pull`, host memory);
///   4. copy of the summed slices back into the device buffer;
///   5. all-gather among the machine's GPUs (NCCL), so that every GPU holds the whole sum.
///
/// The handle completes when the result is in the caller's device buffer, and carries a CUDA
/// event (`handle::device_event()`) so that the trainer's stream can wait for the result
/// instead of its host thread.
///
/// **Uneven slices.** `ncclReduceScatter` and `ncclAllGather` need equal counts per rank, but
/// slices are cut the same on every machine (`cluster::slices`, the largest local size in the
/// job) and a tensor's count need not divide evenly. Instead of padding (a second device
/// buffer per tensor and two extra copies), step 1 is one `ncclReduce` per local rank, rooted
/// at the owner of each contiguous run, and step 5 one `ncclBroadcast` per local rank, each set
/// fused in one `ncclGroupStart`/`ncclGroupEnd` so that NCCL runs them as one operation. Both
/// are in place in the caller's buffer, which the result overwrites anyway.
///
/// **Order.** NCCL needs every local rank to issue the same collectives in the same order, while
/// each trainer calls push_pull in its own order. Local rank 0 decides, as in BytePS: see
/// `order_board` (shared memory, the segment `segment_name(job_id, machine, "nccl")`, which
/// also carries the `ncclUniqueId`).
///
/// **Never blocking the caller, every wait bounded.** `push_pull` only checks the buffer,
/// records a CUDA event on the caller's stream (`push_pull_options::stream`) and hands the
/// operation to this process's stage thread. The stage thread issues the device work on its
/// own stream (after that event), and sleeps on the machine's futex doorbell, which is rung by
/// the other local ranks, by the network's handles, and by the device itself (a host function
/// queued after each step). The NCCL communicator is non-blocking (`ncclConfig_t::blocking =
/// 0`): initialisation and each fused group are polled with `ncclCommGetAsyncError` until
/// the operation's deadline. When a local rank fails (its deadline passes, a CUDA or NCCL call
/// fails, its communicator dies) it records the failure on the board; every local rank then
/// aborts its NCCL communicator (`ncclCommAbort`, which also ends kernels waiting on a peer),
/// fails what is in flight with `communicator_error`, and declares its communicator dead.
///
/// **Devices.** Local rank l uses CUDA device l, or device 0 when the process sees exactly one
/// (CUDA_VISIBLE_DEVICES set per process). NCCL does not support two ranks of one communicator
/// on one device, so a machine's local ranks need a GPU each; several single-GPU "machines"
/// (local size 1) may share a device.
///
/// **Memory.** Each tensor holds pinned host memory for the slices its local rank owns (about
/// count / local_size elements), allocated at first use and freed at shutdown.
///
/// Needs the CUDA runtime and NCCL headers and libraries: link `byteps::cuda`
/// (`find_package(byteps CONFIG COMPONENTS cuda)`). Tested on a GPU only where one is present:
/// see docs/architecture.md ("GPU (NCCL) local stage") for what has and has not run.
///
/// @par Thread Safety
/// `push_pull` may be called from several threads; one operation per tensor at a time.

#if !__has_include(<cuda_runtime_api.h>) || !__has_include(<nccl.h>)
#error "byteps/local/nccl.hpp needs the CUDA runtime and NCCL headers: link byteps::cuda (CMake: find_package(byteps CONFIG COMPONENTS cuda)), or configure byteps with -DBYTEPS_WITH_CUDA=ON"
#endif

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "byteps/core/config.hpp"
#include "byteps/core/dtype.hpp"
#include "byteps/core/error.hpp"
#include "byteps/core/handle.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/core/op_state.hpp"
#include "byteps/core/push_pull_options.hpp"
#include "byteps/detail/shm_segment.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/local/order_board.hpp"
#include "byteps/local/shm.hpp"
#include "byteps/reduce/reducer.hpp"

namespace bps::local {

namespace nccl_detail {

static_assert(sizeof(ncclUniqueId) <= order_board::id_bytes,
              "the order board has no room for this NCCL's unique id");

inline std::string cuda_message(cudaError_t e) {
  return fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
}

/// "<what>: <call> failed: <CUDA's message> (<error name>)", as `E` (`communicator_error`
/// unless the caller passed something wrong).
template <class E = communicator_error>
void cuda_check(cudaError_t e, std::string_view call, std::string_view what) {
  if (e != cudaSuccess)
    throw E(fmt::format("{}: {} failed: {}", what, call, cuda_message(e)));
}

inline std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0')
    return fmt::format("{} ({})", ncclGetErrorString(r), last);
  return ncclGetErrorString(r);
}

/// Throws `communicator_error` for anything but ncclSuccess and ncclInProgress (a
/// non-blocking communicator's "queued; poll ncclCommGetAsyncError").
inline void nccl_check(ncclResult_t r, ncclComm_t comm, std::string_view call,
                       std::string_view what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw communicator_error(fmt::format("{}: {} failed: {}", what, call, nccl_message(r, comm)));
}

inline ncclDataType_t nccl_type(dtype t) {
  switch (t) {
    case dtype::float32: return ncclFloat32;
    case dtype::float64: return ncclFloat64;
    case dtype::float16: return ncclFloat16;
    case dtype::bfloat16: return ncclBfloat16;
    case dtype::int8: return ncclInt8;
    case dtype::uint8: return ncclUint8;
    case dtype::int32: return ncclInt32;
    case dtype::int64: return ncclInt64;
  }
  throw usage_error(fmt::format("dtype value {} has no NCCL type", static_cast<unsigned>(t)));
}

/// Makes `device` current on this thread and restores the previous one on scope exit.
class device_guard {
 public:
  device_guard(int device, std::string_view what) {
    cuda_check(cudaGetDevice(&previous_), "cudaGetDevice", what);
    if (previous_ != device) cuda_check(cudaSetDevice(device), "cudaSetDevice", what);
    else previous_ = -1;
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

/// A `cudaEvent_t` (timing off), owned; the deleter destroys it (CUDA releases it once the
/// device reached it, if it has not yet).
inline std::shared_ptr<void> make_event(std::string_view what) {
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags",
             what);
  return std::shared_ptr<void>(static_cast<void*>(e),
                               [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
}

inline cudaEvent_t event_of(const std::shared_ptr<void>& e) {
  return static_cast<cudaEvent_t>(e.get());
}

/// Page-locked host memory, so that copies to and from the device are asynchronous.
class pinned {
 public:
  pinned() = default;
  pinned(std::size_t bytes, std::string_view what) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = nullptr;
    cuda_check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
               fmt::format("cudaHostAlloc of {} bytes", bytes), what);
    p_ = static_cast<std::byte*>(p);
  }
  pinned(pinned&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  pinned& operator=(pinned&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~pinned() { reset(); }

  std::byte* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return bytes_; }

 private:
  void reset() noexcept {
    if (p_ != nullptr) cudaFreeHost(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  std::byte* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Queued on a stream after a step: wakes every local rank's stage thread. `word` is the
/// doorbell's word in shared memory (a host function must not call CUDA; this rings a futex).
inline void CUDART_CB ring_bell(void* word) {
  doorbell(static_cast<std::atomic<std::uint32_t>*>(word)).ring();
}

}  // namespace nccl_detail

class nccl {
 public:
  static constexpr bool is_identity = false;
  using clock = std::chrono::steady_clock;

  explicit nccl(const Config& cfg)
      : local_rank_(cfg.local_rank),
        local_size_(cfg.local_size),
        attach_timeout_(cfg.rendezvous_timeout),
        log_(cfg.log, "nccl") {}
  nccl(const nccl&) = delete;
  nccl& operator=(const nccl&) = delete;
  ~nccl() { shutdown(); }

  int local_rank() const noexcept { return local_rank_; }
  int local_size() const noexcept { return local_size_; }
  /// The CUDA device this local rank uses (valid after `attach`).
  int device() const noexcept { return device_; }

  /// Picks the device, meets the machine's other local ranks on the order board, and creates
  /// the NCCL communicator of the machine (bounded by BYTEPS_RENDEZVOUS_TIMEOUT_MS).
  void attach(const cluster& c, network& net) {
    cluster_ = c;
    net_ = &net;
    what_ = fmt::format("bps::local::nccl (machine {} local rank {} of {})", c.machine,
                        local_rank_, local_size_);
    log_.rename(fmt::format("worker {}.{} nccl", c.machine, local_rank_));
    device_ = pick_device();
    const auto deadline = clock::now() + attach_timeout_;
    board_segment_ = detail::shm_segment(
        segment_name(c.job_id, c.machine, "nccl"), order_board::bytes(local_size_),
        tensor_key(fmt::format("nccl order board {}", local_size_)), local_size_, deadline,
        what_ + " meeting its local ranks");
    board_.emplace(board_segment_.data(), local_size_, local_rank_);
    bell_.emplace(board_->bell());
    bell_word_.store(board_->bell_word(), std::memory_order_release);

    try {
      open_device(c, deadline);
    } catch (const std::exception& e) {
      // The other local ranks must not wait for this one until their deadline.
      board_->poison(e.what());
      bell_->ring();
      throw;
    }
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
    const request& q = op->req;
    {
      std::lock_guard lock(mu_);
      if (stopped_)
        throw usage_error(q.what + ": this communicator was shut down; create a new one");
      if (!net_)
        throw usage_error(q.what + ": bps::local::nccl was not attached (the communicator "
                                   "attaches it when it joins the cluster)");
      if (!dead_.empty()) throw communicator_error("this communicator is dead: " + dead_);
    }
    if (q.count != 0) check_buffer(q);
    {
      nccl_detail::device_guard on(device_, q.what);
      op->ready = nccl_detail::make_event(q.what);
      nccl_detail::cuda_check<usage_error>(
          cudaEventRecord(nccl_detail::event_of(op->ready),
                          static_cast<cudaStream_t>(q.opts.stream)),
          "cudaEventRecord on the stream of push_pull_options::stream (is it a stream of "
          "device " + std::to_string(device_) + "?)",
          q.what);
      // An empty tensor is done at once: its device event is the caller's stream as it is now.
      op->state->device_event = q.count == 0 ? op->ready : nccl_detail::make_event(q.what);
    }
    {
      std::lock_guard lock(mu_);
      if (stopped_) throw usage_error(q.what + ": this communicator was shut down; create a new one");
      if (!dead_.empty()) throw communicator_error("this communicator is dead: " + dead_);
      auto [it, fresh] = tensors_.try_emplace(q.name);
      tensor& t = it->second;
      if (fresh) {
        t.name = q.name;
        t.key = tensor_key(q.name);
      }
      t.admit(q, fresh);
      if (q.count == 0) {
        op->state->device_event_recorded();
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
    release_device();
    bell_word_.store(nullptr, std::memory_order_release);
    std::lock_guard lock(mu_);
    tensors_.clear();
    board_.reset();
    board_segment_.unlink();
    board_segment_ = detail::shm_segment();
  }

 private:
  struct tensor : tensor_use {  // tensor_use guarded by mu_
    std::string name;
    std::uint64_t key = 0;
    // Stage thread only, from here on.
    std::uint64_t round = 0;
    bool open = false;
    std::vector<std::pair<std::size_t, std::size_t>> owners;  // elements of each local rank
    nccl_detail::pinned host;  // this rank's owned elements, in host memory
    std::shared_ptr<void> reduced;  // recorded after the copy to host
  };

  enum class stage { start, wait_reduce, reducing, network, wait_gather, gathering };
  struct pending {
    request req;
    std::shared_ptr<detail::op_state> state;
    tensor* t = nullptr;
    stage at = stage::start;
    std::shared_ptr<void> ready;  // recorded on the caller's stream by push_pull
    std::vector<handle> slices;
    std::exception_ptr slice_error;  // this rank's slices failed (a server's usage error)
    std::uint32_t flags = 0;         // the gather's entry flags: some rank's slices failed
  };
  using pending_ptr = std::shared_ptr<pending>;

  static constexpr std::size_t zeros_bytes = 1 << 20;  // pinned -0.0 source for broadcasts

  // The stage stream and the NCCL communicator of the machine's local ranks.
  void open_device(const cluster& c, clock::time_point deadline) {
    nccl_detail::device_guard on(device_, what_);
    cudaStream_t s = nullptr;
    nccl_detail::cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags", what_);
    stream_ = s;
    ncclUniqueId id{};
    auto id_bytes = std::as_writable_bytes(std::span(&id, 1));
    if (local_rank_ == 0) {
      nccl_detail::nccl_check(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId", what_);
      board_->publish_id(id_bytes);
      bell_->ring();
    } else {
      while (!board_->read_id(id_bytes)) {
        if (clock::now() > deadline)
          throw communicator_error(fmt::format(
              "{}: local rank 0 of machine {} did not publish the NCCL id within {} ms "
              "(BYTEPS_RENDEZVOUS_TIMEOUT_MS); is it running, with bps::local::nccl?",
              what_, c.machine, attach_timeout_.count()));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every NCCL wait is ours to bound
    ncclComm_t comm = nullptr;
    nccl_detail::nccl_check(ncclCommInitRankConfig(&comm, local_size_, id, local_rank_, &config),
                            comm, "ncclCommInitRankConfig", what_);
    comm_ = comm;
    settle(deadline, "ncclCommInitRankConfig", what_,
           "the other local ranks of this machine did not all create theirs");
    int version = 0;
    ncclGetVersion(&version);
    log_.info("NCCL {} communicator of {} local rank(s) on CUDA device {}; order board in "
              "shared memory {}",
              version, local_size_, device_, segment_name(c.job_id, c.machine, "nccl"));
  }

  int pick_device() const {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
      throw usage_error(fmt::format(
          "{}: no CUDA device is visible to this process (cudaGetDeviceCount: {}); run it on a "
          "machine with a GPU, or use bps::local::host for host buffers",
          what_, e != cudaSuccess ? nccl_detail::cuda_message(e) : std::string("0 devices")));
    if (count == 1) return 0;
    if (local_rank_ < count) return local_rank_;
    throw usage_error(fmt::format("{}: this process sees {} CUDA devices, fewer than its local "
                                  "rank + 1; give each local rank a GPU of its own (NCCL does "
                                  "not put two ranks on one device), or make one device visible "
                                  "per process (CUDA_VISIBLE_DEVICES)",
                                  what_, count));
  }

  // The caller's buffer must be device memory of this rank's device.
  void check_buffer(const request& q) const {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, q.data);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky; clear it
      throw usage_error(fmt::format("{}: cudaPointerGetAttributes of the buffer failed: {}; "
                                    "bps::local::nccl takes device memory",
                                    q.what, nccl_detail::cuda_message(e)));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
      throw usage_error(fmt::format("{}: the buffer is {} memory, and bps::local::nccl takes "
                                    "device memory (cudaMalloc); use bps::local::host or "
                                    "bps::local::none for host buffers",
                                    q.what, a.type == cudaMemoryTypeHost ? "pinned host" : "host"));
    if (a.type == cudaMemoryTypeDevice && a.device != device_)
      throw usage_error(fmt::format("{}: the buffer is on CUDA device {}, but local rank {} uses "
                                    "device {}",
                                    q.what, a.device, local_rank_, device_));
  }

  // Any thread, at any time: the communicator may fail() while attach() is still running.
  void ring() {
    if (auto* word = bell_word_.load(std::memory_order_acquire)) doorbell(word).ring();
  }

  // Polls the non-blocking communicator until the last call's work is queued (or done, for
  // initialisation), at most until `deadline`; also gives up when the board is poisoned.
  void settle(clock::time_point deadline, std::string_view call, std::string_view what,
              std::string_view likely) {
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      nccl_detail::nccl_check(ncclCommGetAsyncError(comm_, &state), comm_,
                              "ncclCommGetAsyncError", what);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress)
        throw communicator_error(fmt::format("{}: {} failed: {}", what, call,
                                             nccl_detail::nccl_message(state, comm_)));
      if (auto why = board_->poisoned())
        throw communicator_error(fmt::format("{}: {} was abandoned: {}", what, call, *why));
      if (clock::now() > deadline)
        throw communicator_error(fmt::format("{}: {} did not complete within its deadline; {}",
                                             what, call, likely));
      if (spins < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(spins < 1024 ? 20 : 500));
    }
  }

  // ---- the stage thread ----

  void stage_loop() {
    std::vector<pending_ptr> active;
    std::deque<order_entry> outbox;
    std::string failure;
    bool aborted = false;
    if (const cudaError_t e = cudaSetDevice(device_); e != cudaSuccess)
      failure = fmt::format("{}: cudaSetDevice({}) on the stage thread failed: {}", what_, device_,
                            nccl_detail::cuda_message(e));
    for (;;) {
      const auto seen = bell_->value();
      bool stopped;
      {
        std::lock_guard lock(mu_);
        for (auto& op : incoming_) active.push_back(std::move(op));
        incoming_.clear();
        stopped = stopped_;
        // A clean shutdown with nothing in flight leaves the other local ranks alone.
        if (stopped && active.empty() && failure.empty()) return;
        if (failure.empty()) failure = dead_;
      }
      if (failure.empty())
        if (auto why = board_->poisoned()) failure = *why;
      bool progressed = false;
      if (failure.empty()) {
        try {
          progressed = step(active, outbox);
        } catch (const std::exception& e) {
          failure = e.what();
        }
      }
      if (!failure.empty()) {
        if (!aborted) abort_device(failure);
        aborted = true;
        fail_all(active, failure);
        if (stopped) return;
        // Dead: push_pull throws from now on; fail what was on its way in until shutdown.
        bell_->wait(seen, std::chrono::milliseconds(100));
        continue;
      }
      if (progressed) continue;
      auto next = clock::time_point::max();
      for (auto& op : active) next = std::min(next, op->req.deadline);
      auto timeout = std::chrono::nanoseconds(-1);
      if (next != clock::time_point::max())
        timeout = std::max(std::chrono::nanoseconds(0), next - clock::now()) +
                  std::chrono::milliseconds(1);
      bell_->wait(seen, timeout);
    }
  }

  // One pass over everything; true when anything moved. Throws what kills the machine.
  bool step(std::vector<pending_ptr>& active, std::deque<order_entry>& outbox) {
    bool progressed = false;
    for (auto it = active.begin(); it != active.end();) {
      pending& op = **it;
      bool done = false;
      progressed |= advance(op, outbox, done);
      if (done) {
        it = active.erase(it);
        progressed = true;
      } else {
        ++it;
      }
    }
    while (!outbox.empty() && board_->announce(outbox.front())) {
      outbox.pop_front();
      progressed = true;
    }
    if (progressed) ring();
    if (local_rank_ == 0 &&
        board_->coordinate([&](std::uint64_t key) { return name_of(active, key); })) {
      progressed = true;
      ring();
    }
    while (auto e = board_->next()) {
      issue(*e, active);
      board_->issued();
      ring();
      progressed = true;
    }
    const auto now = clock::now();
    for (auto& op : active)
      if (now > op->req.deadline && op->at != stage::network) give_up(*op);
    return progressed;
  }

  std::string name_of(const std::vector<pending_ptr>& active, std::uint64_t key) const {
    for (auto& op : active)
      if (op->t->key == key) return op->req.what;
    return fmt::format("the tensor with key {:016x}", key);
  }

  static std::uint64_t fingerprint(const tensor& t) {
    return tensor_key(fmt::format("{} x {}", t.count, dtype_name(t.type)));
  }

  // Moves `op` as far as it can go without the other local ranks; true if it moved.
  bool advance(pending& op, std::deque<order_entry>& outbox, bool& done) {
    tensor& t = *op.t;
    switch (op.at) {
      case stage::start:
        if (!t.open) open(t, op.req);
        outbox.push_back({t.key, t.round, fingerprint(t), order_phase::reduce, 0});
        op.at = stage::wait_reduce;
        return true;
      case stage::wait_reduce:
      case stage::wait_gather:
        return false;
      case stage::reducing: {
        const cudaError_t e = cudaEventQuery(nccl_detail::event_of(t.reduced));
        if (e == cudaErrorNotReady) return false;
        nccl_detail::cuda_check(e, "the device's reduce and copy to host (cudaEventQuery)",
                                op.req.what);
        start_slices(op);
        op.at = stage::network;
        return true;
      }
      case stage::network: {
        for (auto& h : op.slices)
          if (!h.ready()) return false;
        for (auto& h : op.slices) {
          try {
            h.wait();
          } catch (...) {
            if (!op.slice_error) op.slice_error = std::current_exception();
          }
        }
        const auto esize = dtype_size(t.type);
        const auto [begin, end] = t.owners[static_cast<std::size_t>(local_rank_)];
        if (!op.slice_error && end > begin)
          nccl_detail::cuda_check(
              cudaMemcpyAsync(static_cast<std::byte*>(op.req.data) + begin * esize,
                              t.host.data(), (end - begin) * esize, cudaMemcpyHostToDevice,
                              stream_),
              "cudaMemcpyAsync of the summed slices to the device", op.req.what);
        outbox.push_back({t.key, t.round, fingerprint(t), order_phase::gather,
                          op.slice_error ? entry_failed : 0u});
        op.at = stage::wait_gather;
        return true;
      }
      case stage::gathering: {
        const cudaError_t e = cudaEventQuery(nccl_detail::event_of(op.state->device_event));
        if (e == cudaErrorNotReady) return false;
        nccl_detail::cuda_check(e, "the device's all-gather (cudaEventQuery)", op.req.what);
        ++t.round;
        std::exception_ptr error;
        if (op.slice_error)
          error = op.slice_error;
        else if (op.flags & entry_failed)
          error = std::make_exception_ptr(usage_error(fmt::format(
              "{}: another local rank of machine {} failed on this tensor (its log says why); "
              "this buffer does not hold the sum",
              op.req.what, cluster_.machine)));
        finish(op, error);
        done = true;
        return true;
      }
    }
    return false;
  }

  void open(tensor& t, const request& r) {
    t.owners.clear();
    for (int l = 0; l < local_size_; ++l)
      t.owners.push_back(owned_range(r.count, l, local_size_, cluster_.slices));
    const auto [begin, end] = t.owners[static_cast<std::size_t>(local_rank_)];
    t.host = nccl_detail::pinned((end - begin) * dtype_size(r.type), r.what);
    t.reduced = nccl_detail::make_event(r.what);
    t.open = true;
  }

  // Issues the collective of a posted entry; every local rank issues the same, in ring order.
  void issue(const order_entry& e, std::vector<pending_ptr>& active) {
    pending* found = nullptr;
    for (auto& op : active)
      if (op->t->key == e.key && op->t->round == e.round) found = op.get();
    const stage expected = e.phase == order_phase::reduce ? stage::wait_reduce : stage::wait_gather;
    if (found == nullptr || found->at != expected)
      throw communicator_error(fmt::format(
          "{}: local rank 0 ordered the {} of tensor key {:016x} round {}, which this local rank "
          "{}; the local ranks of machine {} no longer agree",
          what_, order_phase_name(e.phase), e.key, e.round,
          found == nullptr ? "has not announced" : "is not ready for", cluster_.machine));
    pending& op = *found;
    tensor& t = *op.t;
    auto* data = static_cast<std::byte*>(op.req.data);
    const auto esize = dtype_size(t.type);
    const auto type = nccl_detail::nccl_type(t.type);
    const auto& what = op.req.what;
    if (e.phase == order_phase::reduce) {
      nccl_detail::cuda_check(cudaStreamWaitEvent(stream_, nccl_detail::event_of(op.ready), 0),
                              "cudaStreamWaitEvent on the caller's stream", what);
      if (!op.req.contributes) fill_negative_zero(data, t.count, t.type, what);
      group(t, what, "ncclReduce", op.req.deadline, [&](int o, std::size_t b, std::size_t n) {
        return ncclReduce(data + b * esize, data + b * esize, n, type, ncclSum, o, comm_, stream_);
      });
      const auto [begin, end] = t.owners[static_cast<std::size_t>(local_rank_)];
      if (end > begin)
        nccl_detail::cuda_check(cudaMemcpyAsync(t.host.data(), data + begin * esize,
                                                (end - begin) * esize, cudaMemcpyDeviceToHost,
                                                stream_),
                                "cudaMemcpyAsync of the reduced slices to host memory", what);
      nccl_detail::cuda_check(cudaEventRecord(nccl_detail::event_of(t.reduced), stream_),
                              "cudaEventRecord", what);
      op.at = stage::reducing;
    } else {
      op.flags = e.flags;
      group(t, what, "ncclBroadcast", op.req.deadline, [&](int o, std::size_t b, std::size_t n) {
        return ncclBroadcast(data + b * esize, data + b * esize, n, type, o, comm_, stream_);
      });
      nccl_detail::cuda_check(
          cudaEventRecord(nccl_detail::event_of(op.state->device_event), stream_),
          "cudaEventRecord", what);
      op.state->device_event_recorded();
      op.at = stage::gathering;
    }
    nccl_detail::cuda_check(cudaLaunchHostFunc(stream_, nccl_detail::ring_bell, board_->bell_word()),
                            "cudaLaunchHostFunc", what);
  }

  // One collective per local rank's run of elements, fused in one NCCL group.
  template <class Call>
  void group(const tensor& t, const std::string& what, std::string_view name,
             clock::time_point deadline, Call call) {
    nccl_detail::nccl_check(ncclGroupStart(), comm_, "ncclGroupStart", what);
    for (int o = 0; o < local_size_; ++o) {
      const auto [b, end] = t.owners[static_cast<std::size_t>(o)];
      if (end == b) continue;
      const ncclResult_t r = call(o, b, end - b);
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        nccl_detail::nccl_check(r, comm_, name, what);
      }
    }
    nccl_detail::nccl_check(ncclGroupEnd(), comm_, fmt::format("ncclGroupEnd of the {}s", name),
                            what);
    settle(deadline, fmt::format("the {}s", name), what,
           "a local rank of this machine may be stuck");
  }

  // A broadcast's non-root contributes -0.0 (x + -0.0 is x for every x) or 0.
  void fill_negative_zero(std::byte* data, std::size_t count, dtype type, const std::string& what) {
    const auto esize = dtype_size(type);
    if (!is_floating(type)) {
      nccl_detail::cuda_check(cudaMemsetAsync(data, 0, count * esize, stream_),
                              "cudaMemsetAsync", what);
      return;
    }
    auto& source = zeros_[static_cast<std::size_t>(type)];
    if (source.size() == 0) {
      source = nccl_detail::pinned(zeros_bytes, what);
      reduce::fill_negative_zero(source.data(), zeros_bytes / esize, type);
    }
    for (std::size_t done = 0; done < count * esize; done += zeros_bytes)
      nccl_detail::cuda_check(
          cudaMemcpyAsync(data + done, source.data(), std::min(zeros_bytes, count * esize - done),
                          cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync of -0.0 into a broadcast's non-root buffer", what);
  }

  // The network part: each owned slice through the servers, from pinned host memory.
  void start_slices(pending& op) {
    tensor& t = *op.t;
    const auto esize = dtype_size(t.type);
    const auto base = t.owners[static_cast<std::size_t>(local_rank_)].first;
    const auto [first, last] = owned_slices(local_rank_, local_size_, cluster_.slices);
    for (int s = first; s < last; ++s) {
      const auto [begin, end] = slice_range(t.count, s, cluster_.slices);
      void* data = end > begin ? t.host.data() + (begin - base) * esize : nullptr;
      auto h = net_->push_pull(slice_name(t.name, s),
                               fmt::format("{} (slice {} of {})", op.req.what, s, cluster_.slices),
                               data, end - begin, t.type, op.req.opts);
      h.when_done([this] { ring(); });
      op.slices.push_back(std::move(h));
    }
  }

  [[noreturn]] void give_up(const pending& op) {
    std::string waiting;
    switch (op.at) {
      case stage::wait_reduce:
        waiting = fmt::format("the other local ranks of machine {} to call it (local rank 0 "
                              "orders the reduce once all {} did)",
                              cluster_.machine, local_size_);
        break;
      case stage::wait_gather:
        waiting = fmt::format("the other local ranks of machine {} to get their slices back "
                              "from the servers",
                              cluster_.machine);
        break;
      case stage::reducing:
        waiting = "the device to finish the reduce and the copy to host (is the caller's stream "
                  "stuck, or a local rank's GPU?)";
        break;
      case stage::gathering:
        waiting = "the device to finish the copy back and the all-gather";
        break;
      default:
        waiting = "this local rank's stage thread";
    }
    throw communicator_error(fmt::format("{} did not finish within its deadline "
                                         "(BYTEPS_OP_TIMEOUT_MS): still waiting for {}",
                                         op.req.what, waiting));
  }

  // The machine's local ranks cannot go on together: record why on the board (every local
  // rank aborts), abort NCCL (no kernel waits on a peer any more), let the device finish with
  // every buffer, and declare the communicator dead.
  void abort_device(const std::string& why) noexcept {
    try {
      if (board_->poison(why)) log_.error("{}", why);
      ring();
      if (comm_ != nullptr) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
      }
      drain("after a failure");
      {
        std::lock_guard lock(mu_);
        if (dead_.empty()) dead_ = why;
      }
      // Not under mu_: the communicator's failure path calls fail(), which takes it.
      net_->fail(why);
    } catch (const std::exception& e) {
      log_.error("{}: while failing ({}): {}", what_, why, e.what());
    }
  }

  void fail_all(std::vector<pending_ptr>& active, const std::string& why) {
    for (auto& op : active) {
      for (auto& h : op->slices) {
        try {  // the communicator failed them; wait until the transport let go of the memory
          h.wait_for(std::chrono::seconds(10));
        } catch (...) {
        }
      }
      auto text = why.starts_with(op->req.what) ? why : op->req.what + ": " + why;
      finish(*op, std::make_exception_ptr(communicator_error(text)));
    }
    active.clear();
  }

  // Waits (at most 10 s) until the stream ran everything queued on it.
  bool drain(std::string_view when) {
    if (stream_ == nullptr) return true;
    const auto until = clock::now() + std::chrono::seconds(10);
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e != cudaErrorNotReady) return true;  // done, or an error that ended the work
      if (clock::now() > until) {
        log_.error("the stage stream of device {} still has work 10 s {}; its buffers are kept",
                   device_, when);
        drained_ = false;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void finish(pending& op, std::exception_ptr e) {
    {
      std::lock_guard lock(mu_);
      op.t->busy = false;
    }
    op.state->finish(std::move(e));
  }

  // After the stage thread ended: the device resources go, on the caller's thread.
  void release_device() noexcept {
    if (device_ < 0 || stream_ == nullptr) {
      device_ = -1;
      return;
    }
    try {
      nccl_detail::device_guard on(device_, what_);
      bool idle = drained_ && drain("at shutdown");
      if (comm_ != nullptr) {
        ncclCommAbort(comm_);  // nothing is in flight: frees this rank's resources, never waits
        comm_ = nullptr;
        if (!idle) idle = drain("after ncclCommAbort at shutdown");
      }
      if (!idle) {
        // The device may still use these: keep them (until the process ends) rather than free
        // them under it. The doorbell its host functions ring lives in the board segment.
        auto* kept = new std::vector<nccl_detail::pinned>();
        std::lock_guard lock(mu_);
        for (auto& [name, t] : tensors_) kept->push_back(std::move(t.host));
        for (auto& [type, z] : zeros_) kept->push_back(std::move(z));
        new detail::shm_segment(std::move(board_segment_));
      } else {
        cudaStreamDestroy(stream_);
      }
      stream_ = nullptr;
      zeros_.clear();
    } catch (const std::exception& e) {
      log_.error("{}: releasing the device failed: {}", what_, e.what());
    }
    device_ = -1;
  }

  int local_rank_;
  int local_size_;
  std::chrono::milliseconds attach_timeout_;
  logger log_;
  std::string what_ = "bps::local::nccl";
  cluster cluster_;
  network* net_ = nullptr;
  int device_ = -1;
  detail::shm_segment board_segment_;
  std::optional<order_board> board_;
  std::optional<doorbell> bell_;  // attach and the stage thread
  std::atomic<std::atomic<std::uint32_t>*> bell_word_{nullptr};  // ring() from any thread
  cudaStream_t stream_ = nullptr;  // the stage stream: every device step of every operation
  ncclComm_t comm_ = nullptr;
  std::unordered_map<std::size_t, nccl_detail::pinned> zeros_;  // by dtype; stage thread only
  bool drained_ = true;  // false once the stage stream did not run dry in time
  std::mutex mu_;
  std::unordered_map<std::string, tensor> tensors_;  // node-based: pending ops point into it
  std::deque<pending_ptr> incoming_;
  std::string dead_;
  bool stopped_ = false;
  std::thread stage_;
};

static_assert(LocalCollective<nccl>);

}  // namespace bps::local
