#pragma once
/// @file
/// The machine-wide order of `bps::local::nccl` (see local/nccl.hpp and local/order_board.hpp):
/// what a local rank announces on the order board, and the device work it issues once local
/// rank 0 posted an entry: the fused NCCL groups, the copies and events around them, and the
/// -0.0 that a broadcast's non-root contributes. Included at the end of local/nccl.hpp.

#include "byteps/local/nccl.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/core.h>

#include "byteps/core/keys.hpp"
#include "byteps/reduce/reducer.hpp"

namespace bps::local {

inline std::uint64_t nccl::fingerprint(const work& w) {
  return tensor_key(fmt::format("{} x {}", w.count, dtype_name(w.type)));
}

inline std::string nccl::name_of(std::uint64_t key) const {
  if (auto it = awaiting_.find(key); it != awaiting_.end()) return it->second.w->what;
  return fmt::format("the tensor with key {:016x}", key);
}

inline void nccl::post(work& w, tensor_state& t, step_state& s, order_phase phase,
                       std::uint32_t flags) {
  outbox_.push_back({w.key, w.round, fingerprint(w), phase, flags});
  awaiting_[w.key] = announced{&w, &t, &s};
}

// Issues the collective of a posted entry; every local rank issues the same, in ring order.
inline void nccl::issue(const order_entry& e) {
  using stage = step_state::stage;
  const auto it = awaiting_.find(e.key);
  const stage expected = e.phase == order_phase::reduce ? stage::wait_reduce : stage::wait_gather;
  if (it == awaiting_.end() || it->second.w->round != e.round || it->second.s->at != expected)
    throw communicator_error(fmt::format(
        "{}: local rank 0 ordered the {} of tensor key {:016x} round {}, which this local rank "
        "{}; the local ranks of machine {} no longer agree",
        what_, order_phase_name(e.phase), e.key, e.round,
        it == awaiting_.end() ? "has not announced" : "is not ready for", cluster_.machine));
  auto [w, t, s] = it->second;
  awaiting_.erase(it);
  auto* data = static_cast<std::byte*>(w->data);
  const auto esize = dtype_size(w->type);
  const auto type = nccl_detail::nccl_type(w->type);
  const auto& what = w->what;
  cudaStream_t stream = device_.stream();
  if (e.phase == order_phase::reduce) {
    nccl_detail::cuda_check(cudaStreamWaitEvent(stream, nccl_detail::event_of(s->ready), 0),
                            "cudaStreamWaitEvent on the caller's stream", what);
    if (!w->contributes) fill_negative_zero(data, w->count, w->type, what);
    group(*t, *w, "ncclReduce", [&](int o, std::size_t b, std::size_t n) {
      return ncclReduce(data + b * esize, data + b * esize, n, type, ncclSum, o, device_.comm(),
                        stream);
    });
    // Each owned partition's copy to host with its own event, so that the engine pushes it
    // while the next is copied.
    const std::size_t begin = t->owners[static_cast<std::size_t>(local_rank_)].first;
    for (std::size_t j = 0; j < t->copied_out.size(); ++j) {
      const part& p = w->parts[t->owned_first + j];
      nccl_detail::cuda_check(
          cudaMemcpyAsync(t->host->data() + (p.first - begin) * esize, data + p.first * esize,
                          (p.last - p.first) * esize, cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync of a reduced partition to host memory", what);
      nccl_detail::cuda_check(cudaEventRecord(nccl_detail::event_of(t->copied_out[j]), stream),
                              "cudaEventRecord", what);
    }
    s->at = stage::reducing;
  } else {
    s->flags = e.flags;
    group(*t, *w, "ncclBroadcast", [&](int o, std::size_t b, std::size_t n) {
      return ncclBroadcast(data + b * esize, data + b * esize, n, type, o, device_.comm(), stream);
    });
    nccl_detail::cuda_check(cudaEventRecord(nccl_detail::event_of(w->state->device_event), stream),
                            "cudaEventRecord", what);
    w->state->device_event_recorded();
    s->at = stage::gathering;
  }
  nccl_detail::cuda_check(
      cudaLaunchHostFunc(stream, nccl_detail::ring_bell, device_.board().bell_word()),
      "cudaLaunchHostFunc", what);
}

// One collective per local rank's run of elements, fused in one NCCL group. A machine of one
// local rank has nothing to reduce or broadcast (both are in place): no group, no kernel, no
// wait for NCCL to queue it.
template <class Call>
void nccl::group(const tensor_state& t, const work& w, std::string_view name, Call call) {
  if (local_size_ == 1) return;
  ncclComm_t comm = device_.comm();
  nccl_detail::nccl_check(ncclGroupStart(), comm, "ncclGroupStart", w.what);
  for (int o = 0; o < local_size_; ++o) {
    const auto [b, end] = t.owners[static_cast<std::size_t>(o)];
    if (end == b) continue;
    const ncclResult_t r = call(o, b, end - b);
    if (r != ncclSuccess && r != ncclInProgress) {
      ncclGroupEnd();
      nccl_detail::nccl_check(r, comm, name, w.what);
    }
  }
  nccl_detail::nccl_check(ncclGroupEnd(), comm, fmt::format("ncclGroupEnd of the {}s", name),
                          w.what);
  device_.settle(w.deadline, fmt::format("the {}s", name), w.what,
                 "a local rank of this machine may be stuck");
}

// A broadcast's non-root contributes -0.0 (x + -0.0 is x for every x) or 0.
inline void nccl::fill_negative_zero(std::byte* data, std::size_t count, dtype type,
                                     const std::string& what) {
  const auto esize = dtype_size(type);
  cudaStream_t stream = device_.stream();
  if (!is_floating(type)) {
    nccl_detail::cuda_check(cudaMemsetAsync(data, 0, count * esize, stream), "cudaMemsetAsync",
                            what);
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
                        cudaMemcpyHostToDevice, stream),
        "cudaMemcpyAsync of -0.0 into a broadcast's non-root buffer", what);
}

}  // namespace bps::local
