#pragma once
/// @file
/// `bps::local::nccl_device`: what one local rank of `bps::local::nccl` holds on its GPU: the
/// device it uses, its stage stream, the machine's order board in shared memory (which carries
/// the `ncclUniqueId`) and the non-blocking NCCL communicator of the machine's local ranks;
/// how it meets the other local ranks, polls NCCL with a deadline, aborts, and lets go of the
/// device at the end.
///
/// **Devices.** Local rank l uses CUDA device l, or device 0 when the process sees exactly one
/// (CUDA_VISIBLE_DEVICES set per process). NCCL does not support two ranks of one communicator
/// on one device, so a machine's local ranks need a GPU each; several single-GPU "machines"
/// (local size 1) may share a device.

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "byteps/core/error.hpp"
#include "byteps/core/keys.hpp"
#include "byteps/core/log.hpp"
#include "byteps/detail/shm_segment.hpp"
#include "byteps/local/cuda_helpers.hpp"
#include "byteps/local/local_collective.hpp"
#include "byteps/local/order_board.hpp"
#include "byteps/local/shm.hpp"

namespace bps::local {

class nccl_device {
 public:
  using clock = std::chrono::steady_clock;

  nccl_device(int local_rank, int local_size, logger& log)
      : local_rank_(local_rank), local_size_(local_size), log_(log) {}
  nccl_device(const nccl_device&) = delete;
  nccl_device& operator=(const nccl_device&) = delete;

  int device() const noexcept { return device_; }
  cudaStream_t stream() const noexcept { return stream_; }
  ncclComm_t comm() const noexcept { return comm_; }
  order_board& board() { return *board_; }
  bool open() const noexcept { return board_.has_value(); }

  /// Picks the device, meets the machine's other local ranks on the order board, and creates
  /// the stage stream and the NCCL communicator, all by `deadline`.
  void attach(const cluster& c, const std::string& what, clock::time_point deadline,
              std::chrono::milliseconds timeout) {
    device_ = pick_device(what);
    board_segment_ = detail::shm_segment(
        segment_name(c.job_id, c.machine, "nccl"), order_board::bytes(local_size_),
        tensor_key(fmt::format("nccl order board {}", local_size_)), local_size_, deadline,
        what + " meeting its local ranks");
    board_.emplace(board_segment_.data(), local_size_, local_rank_);
    try {
      create(c, what, deadline, timeout);
    } catch (const std::exception& e) {
      // The other local ranks must not wait for this one until their deadline.
      board_->poison(e.what());
      board_->bell().ring();
      throw;
    }
  }

  /// Makes this rank's device current on the calling thread, once per thread.
  void use_on_this_thread(std::string_view what) {
    if (current_thread_ == std::this_thread::get_id()) return;
    nccl_detail::cuda_check(cudaSetDevice(device_), "cudaSetDevice on the stage thread", what);
    current_thread_ = std::this_thread::get_id();
  }

  /// The caller's buffer must be device memory of this rank's device.
  void check_buffer(const void* data, const std::string& what) const {
    cudaPointerAttributes a{};
    const cudaError_t e = cudaPointerGetAttributes(&a, data);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky; clear it
      throw usage_error(fmt::format("{}: cudaPointerGetAttributes of the buffer failed: {}; "
                                    "bps::local::nccl takes device memory",
                                    what, nccl_detail::cuda_message(e)));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
      throw usage_error(fmt::format("{}: the buffer is {} memory, and bps::local::nccl takes "
                                    "device memory (cudaMalloc); use bps::local::host or "
                                    "bps::local::none for host buffers",
                                    what, a.type == cudaMemoryTypeHost ? "pinned host" : "host"));
    if (a.type == cudaMemoryTypeDevice && a.device != device_)
      throw usage_error(fmt::format("{}: the buffer is on CUDA device {}, but local rank {} uses "
                                    "device {}",
                                    what, a.device, local_rank_, device_));
  }

  /// Polls the non-blocking communicator until the last call's work is queued (or done, for
  /// initialisation), at most until `deadline`; also gives up when the board is poisoned.
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

  /// The machine's local ranks cannot go on together: record why on the board (every local
  /// rank aborts), abort NCCL (no kernel waits on a peer any more) and let the device finish
  /// with every buffer.
  void abort(const std::string& why) {
    if (!board_) return;
    if (board_->poison(why)) log_.error("{}", why);
    board_->bell().ring();
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    drain("after a failure");
  }

  /// Lets go of the device, on the caller's thread, once no step runs any more. When the
  /// stream does not run dry, `keep` (pinned memory the device may still read or write) and the
  /// board (whose doorbell its host functions ring) are kept until the process ends rather
  /// than freed under the device.
  void release(std::vector<nccl_detail::pinned> keep, const std::string& what) noexcept {
    if (device_ < 0 || stream_ == nullptr) {
      device_ = -1;
      close_board();
      return;
    }
    try {
      nccl_detail::device_guard on(device_, what);
      bool idle = drained_ && drain("at shutdown");
      if (comm_ != nullptr) {
        ncclCommAbort(comm_);  // nothing is in flight: frees this rank's resources, never waits
        comm_ = nullptr;
        if (!idle) idle = drain("after ncclCommAbort at shutdown");
      }
      if (!idle) {
        new std::vector<nccl_detail::pinned>(std::move(keep));
        new detail::shm_segment(std::move(board_segment_));
      } else {
        keep.clear();
        cudaStreamDestroy(stream_);
      }
      stream_ = nullptr;
    } catch (const std::exception& e) {
      log_.error("{}: releasing the device failed: {}", what, e.what());
    }
    device_ = -1;
    close_board();
  }

 private:
  int pick_device(const std::string& what) const {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
      throw usage_error(fmt::format(
          "{}: no CUDA device is visible to this process (cudaGetDeviceCount: {}); run it on a "
          "machine with a GPU, or use bps::local::host for host buffers",
          what, e != cudaSuccess ? nccl_detail::cuda_message(e) : std::string("0 devices")));
    if (count == 1) return 0;
    if (local_rank_ < count) return local_rank_;
    throw usage_error(fmt::format("{}: this process sees {} CUDA devices, fewer than its local "
                                  "rank + 1; give each local rank a GPU of its own (NCCL does "
                                  "not put two ranks on one device), or make one device visible "
                                  "per process (CUDA_VISIBLE_DEVICES)",
                                  what, count));
  }

  // The stage stream and the NCCL communicator of the machine's local ranks.
  void create(const cluster& c, const std::string& what, clock::time_point deadline,
              std::chrono::milliseconds timeout) {
    nccl_detail::device_guard on(device_, what);
    cudaStream_t s = nullptr;
    nccl_detail::cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags", what);
    stream_ = s;
    ncclUniqueId id{};
    auto id_bytes = std::as_writable_bytes(std::span(&id, 1));
    if (local_rank_ == 0) {
      nccl_detail::nccl_check(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId", what);
      board_->publish_id(id_bytes);
      board_->bell().ring();
    } else {
      while (!board_->read_id(id_bytes)) {
        if (clock::now() > deadline)
          throw communicator_error(fmt::format(
              "{}: local rank 0 of machine {} did not publish the NCCL id within {} ms "
              "(BYTEPS_RENDEZVOUS_TIMEOUT_MS); is it running, with bps::local::nccl?",
              what, c.machine, timeout.count()));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every NCCL wait is ours to bound
    ncclComm_t comm = nullptr;
    nccl_detail::nccl_check(ncclCommInitRankConfig(&comm, local_size_, id, local_rank_, &config),
                            comm, "ncclCommInitRankConfig", what);
    comm_ = comm;
    settle(deadline, "ncclCommInitRankConfig", what,
           "the other local ranks of this machine did not all create theirs");
    int version = 0;
    ncclGetVersion(&version);
    log_.info("NCCL {} communicator of {} local rank(s) on CUDA device {}; order board in "
              "shared memory {}",
              version, local_size_, device_, segment_name(c.job_id, c.machine, "nccl"));
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

  void close_board() noexcept {
    board_.reset();
    board_segment_.unlink();
    board_segment_ = detail::shm_segment();
  }

  int local_rank_;
  int local_size_;
  logger& log_;
  int device_ = -1;
  detail::shm_segment board_segment_;
  std::optional<order_board> board_;
  cudaStream_t stream_ = nullptr;  // the stage stream: every device step of every operation
  ncclComm_t comm_ = nullptr;
  bool drained_ = true;  // false once the stage stream did not run dry in time
  std::thread::id current_thread_;  // where cudaSetDevice(device_) last ran
};

}  // namespace bps::local
