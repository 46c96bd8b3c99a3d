// The NCCL half of the CPU stand-in for CUDA and NCCL (see fake_cuda.cpp for the whole model):
// communicators that meet in cliques by unique id, and groups that run as one stream task
// waiting, like a kernel, until every rank of the communicator brought the same group.
#include "fake_device.hpp"
#include "fake_runtime.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <byteps/core/dtype.hpp>
#include <byteps/reduce/reducer.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

using fake_device::runtime::enqueue;

namespace {

struct clique;
struct comm_state {
  std::shared_ptr<clique> group;
  int rank = 0;
  int device = 0;
  std::atomic<bool> aborted{false};
  std::uint64_t sequence = 0;          // groups issued
  std::atomic<int> polls_in_progress{0};  // ncclCommGetAsyncError says in-progress this often
  std::atomic<ncclResult_t> async_error{ncclSuccess};
};

struct queued_op {
  bool reduce = true;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  int root = 0;
};

struct clique {
  int nranks = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> devices;  // by rank, -1 until it joined
  int joined = 0;
  bool duplicate_device = false;
  // sequence -> the ops each rank brought, and how many ranks are done with it
  struct round {
    std::vector<std::vector<queued_op>> ops;
    int arrived = 0;
    bool done = false;
  };
  std::map<std::uint64_t, round> rounds;
};

std::mutex nccl_mu;
std::map<std::uint64_t, std::shared_ptr<clique>> cliques;
std::map<void*, std::shared_ptr<comm_state>> comms;
std::atomic<std::uint64_t> next_id{1};
thread_local int group_depth = 0;
thread_local std::vector<std::pair<std::shared_ptr<comm_state>, std::pair<queued_op, cudaStream_t>>>
    grouped;

std::shared_ptr<comm_state> comm_of(ncclComm_t c) {
  std::lock_guard lock(nccl_mu);
  auto it = comms.find(c);
  return it == comms.end() ? nullptr : it->second;
}

bps::dtype dtype_of(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32: return bps::dtype::float32;
    case ncclFloat64: return bps::dtype::float64;
    case ncclFloat16: return bps::dtype::float16;
    case ncclBfloat16: return bps::dtype::bfloat16;
    case ncclInt8: return bps::dtype::int8;
    case ncclUint8: return bps::dtype::uint8;
    case ncclInt32: return bps::dtype::int32;
    case ncclInt64: return bps::dtype::int64;
    default: std::abort();
  }
}

// The stream task of one rank's group: waits for every rank, the last one computes.
void run_group(std::shared_ptr<comm_state> c, std::uint64_t seq, std::vector<queued_op> ops) {
  clique& g = *c->group;
  std::unique_lock lock(g.mu);
  auto& r = g.rounds[seq];
  if (r.ops.empty()) r.ops.resize(static_cast<std::size_t>(g.nranks));
  r.ops[static_cast<std::size_t>(c->rank)] = std::move(ops);
  if (++r.arrived == g.nranks) {
    // Every rank brought the same list of collectives (bps::local::nccl's order board); run
    // each across the ranks, in rank order.
    for (std::size_t k = 0; k < r.ops[0].size(); ++k) {
      const queued_op& first = r.ops[0][k];
      const auto t = dtype_of(first.type);
      const auto bytes = first.count * bps::dtype_size(t);
      const auto& root_op = r.ops[static_cast<std::size_t>(first.root)][k];
      if (first.reduce) {
        std::vector<const std::byte*> inputs;
        for (auto& per_rank : r.ops) inputs.push_back(static_cast<const std::byte*>(per_rank[k].send));
        std::vector<std::byte> sum(bytes);
        bps::reduce::sum_of(sum.data(), inputs, first.count, t);
        std::memcpy(root_op.recv, sum.data(), bytes);
      } else {
        for (auto& per_rank : r.ops)
          if (per_rank[k].recv != root_op.send) std::memcpy(per_rank[k].recv, root_op.send, bytes);
      }
    }
    r.done = true;
    g.cv.notify_all();
  } else {
    // As a kernel spinning on its peers: only this rank's own abort ends the wait.
    while (!r.done && !c->aborted) g.cv.wait_for(lock, std::chrono::milliseconds(5));
  }
}

}  // namespace

namespace fake_device {

int live_comms() {
  std::lock_guard lock(nccl_mu);
  return static_cast<int>(comms.size());
}

}  // namespace fake_device

// ---- NCCL ----

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "fake NCCL error";
  }
}

const char* ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  *id = ncclUniqueId{};
  const std::uint64_t v = next_id++;
  std::memcpy(id->internal, &v, sizeof v);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  std::uint64_t key = 0;
  std::memcpy(&key, id.internal, sizeof key);
  auto c = std::make_shared<comm_state>();
  c->rank = rank;
  c->device = fake_device::runtime::current_device();
  {
    std::lock_guard lock(nccl_mu);
    auto& g = cliques[key];
    if (!g) {
      g = std::make_shared<clique>();
      g->nranks = nranks;
      g->devices.assign(static_cast<std::size_t>(nranks), -1);
    }
    c->group = g;
    comms[c.get()] = c;
  }
  {
    std::lock_guard lock(c->group->mu);
    auto& g = *c->group;
    for (int d : g.devices)
      if (d == c->device) g.duplicate_device = true;  // as NCCL: "Duplicate GPU detected"
    g.devices[static_cast<std::size_t>(rank)] = c->device;
    ++g.joined;
  }
  *out = reinterpret_cast<ncclComm_t>(c.get());
  const bool blocking = config == nullptr || config->blocking != 0;
  return blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  auto c = comm_of(comm);
  if (!c) return ncclInvalidArgument;
  {
    std::lock_guard lock(c->group->mu);
    if (c->group->duplicate_device) {
      *state = ncclInvalidUsage;
      return ncclSuccess;
    }
    if (c->group->joined < c->group->nranks) {  // initialisation waits for every rank
      *state = ncclInProgress;
      return ncclSuccess;
    }
  }
  if (c->polls_in_progress > 0) {
    --c->polls_in_progress;
    *state = ncclInProgress;
    return ncclSuccess;
  }
  *state = c->async_error;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  std::shared_ptr<comm_state> c;
  {
    std::lock_guard lock(nccl_mu);
    auto it = comms.find(comm);
    if (it == comms.end()) return ncclInvalidArgument;
    c = std::move(it->second);
    comms.erase(it);
  }
  c->aborted = true;
  c->group->cv.notify_all();
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  // One task per communicator, on the stream of its first op (bps::local::nccl uses one).
  std::map<comm_state*, std::pair<std::shared_ptr<comm_state>, std::vector<queued_op>>> by_comm;
  std::map<comm_state*, cudaStream_t> stream_of;
  for (auto& [c, op] : grouped) {
    auto& slot = by_comm[c.get()];
    slot.first = c;
    slot.second.push_back(op.first);
    stream_of.emplace(c.get(), op.second);
  }
  grouped.clear();
  for (auto& [raw, entry] : by_comm) {
    auto c = entry.first;
    const auto seq = c->sequence++;
    c->polls_in_progress = 2;  // a non-blocking communicator queues in the background
    enqueue(stream_of[raw], [c, seq, ops = std::move(entry.second)]() mutable {
      run_group(c, seq, std::move(ops));
    });
  }
  return ncclInProgress;
}

namespace {
std::mutex collectives_mu;
std::map<int, long> collectives_by_size;  // communicator size -> collective calls

ncclResult_t add(ncclComm_t comm, queued_op op, cudaStream_t s) {
  auto c = comm_of(comm);
  if (!c) return ncclInvalidArgument;
  {
    std::lock_guard lock(collectives_mu);
    ++collectives_by_size[c->group->nranks];
  }
  if (op.root < 0 || op.root >= c->group->nranks) return ncclInvalidArgument;
  const bool alone = group_depth == 0;
  if (alone) ncclGroupStart();
  grouped.push_back({c, {op, s}});
  if (alone) return ncclGroupEnd();
  return ncclSuccess;
}
}  // namespace

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s) {
  if (op != ncclSum) return ncclInvalidArgument;
  return add(comm, {true, send, recv, count, type, root}, s);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s) {
  return add(comm, {false, send, recv, count, type, root}, s);
}

long fake_device::collectives(int nranks) {
  std::lock_guard lock(collectives_mu);
  const auto it = collectives_by_size.find(nranks);
  return it == collectives_by_size.end() ? 0 : it->second;
}
