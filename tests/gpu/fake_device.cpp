// A CPU stand-in for the parts of the CUDA runtime and NCCL that bps::local::nccl calls, so
// that its pipeline (stage thread, order board, events, slices through the servers, failures)
// runs on machines with no GPU. Linked instead of libcudart and libnccl; only their headers are
// used. It is a model, not an emulator: "device memory" is host memory, each stream is a thread
// that runs its queue in order (so copies, events and host functions really are asynchronous),
// and a NCCL group is one task on the stream that waits, like a kernel, until every rank of the
// communicator reached the same group, then sums or copies. What it cannot show: real kernels,
// real device memory, NCCL's own behaviour. See fake_device.hpp for the knobs tests turn.
#include "fake_device.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <byteps/core/dtype.hpp>
#include <byteps/reduce/reducer.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace {

std::atomic<int> device_count{4};
thread_local int current_device = 0;

// ---- memory ----

struct allocation {
  std::size_t bytes;
  int device;
};
std::mutex memory_mu;
std::map<const std::byte*, allocation> device_memory;  // start -> size, device

// ---- events ----

struct event_state {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;   // records issued
  std::uint64_t completed = 0;  // records the stream reached
};
std::mutex handles_mu;
std::map<void*, std::shared_ptr<event_state>> events;

std::shared_ptr<event_state> event_of(cudaEvent_t e) {
  std::lock_guard lock(handles_mu);
  auto it = events.find(e);
  return it == events.end() ? nullptr : it->second;
}

// ---- streams: a thread each, running its queue in order ----

struct stream_state {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool running = false;
  bool stop = false;
  std::thread worker;

  stream_state() {
    worker = std::thread([this] {
      std::unique_lock lock(mu);
      for (;;) {
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        auto task = std::move(queue.front());
        queue.pop_front();
        running = true;
        lock.unlock();
        task();
        lock.lock();
        running = false;
        cv.notify_all();
      }
    });
  }
  ~stream_state() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }
  void push(std::function<void()> f) {
    {
      std::lock_guard lock(mu);
      queue.push_back(std::move(f));
    }
    cv.notify_all();
  }
  bool idle() {
    std::lock_guard lock(mu);
    return queue.empty() && !running;
  }
};
std::map<void*, std::shared_ptr<stream_state>> streams;

// Runs `f` on `s`'s thread in order, or now for the legacy default stream (nullptr).
cudaError_t enqueue(cudaStream_t s, std::function<void()> f) {
  if (s == nullptr) {
    f();
    return cudaSuccess;
  }
  std::shared_ptr<stream_state> st;
  {
    std::lock_guard lock(handles_mu);
    auto it = streams.find(s);
    if (it == streams.end()) return cudaErrorInvalidResourceHandle;
    st = it->second;
  }
  st->push(std::move(f));
  return cudaSuccess;
}

// ---- NCCL ----

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
    std::vector<std::byte> scratch;
    for (std::size_t k = 0; k < r.ops[0].size(); ++k) {
      const queued_op& first = r.ops[0][k];
      const auto t = dtype_of(first.type);
      const auto bytes = first.count * bps::dtype_size(t);
      const auto& root_op = r.ops[static_cast<std::size_t>(first.root)][k];
      if (first.reduce) {
        std::vector<const std::byte*> inputs;
        for (auto& per_rank : r.ops) inputs.push_back(static_cast<const std::byte*>(per_rank[k].send));
        std::vector<std::byte> sum(bytes);
        bps::reduce::sum_of(sum.data(), inputs, first.count, t, scratch);
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

void set_device_count(int n) { device_count = n; }

void* device_alloc(std::size_t bytes) {
  void* p = std::malloc(std::max<std::size_t>(bytes, 1));
  std::lock_guard lock(memory_mu);
  device_memory[static_cast<const std::byte*>(p)] = {std::max<std::size_t>(bytes, 1),
                                                       current_device};
  return p;
}

void device_free(void* p) {
  {
    std::lock_guard lock(memory_mu);
    device_memory.erase(static_cast<const std::byte*>(p));
  }
  std::free(p);
}

int live_streams() {
  std::lock_guard lock(handles_mu);
  return static_cast<int>(streams.size());
}

int live_comms() {
  std::lock_guard lock(nccl_mu);
  return static_cast<int>(comms.size());
}

}  // namespace fake_device

// ---- the CUDA runtime ----

const char* CUDARTAPI cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "fake device error";
  }
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
  }
}

cudaError_t CUDARTAPI cudaGetLastError(void) { return cudaSuccess; }

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = device_count;
  return device_count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (device < 0 || device >= device_count) return cudaErrorInvalidDevice;
  current_device = device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(cudaPointerAttributes* a, const void* ptr) {
  *a = cudaPointerAttributes{};
  a->type = cudaMemoryTypeUnregistered;
  a->device = -2;
  std::lock_guard lock(memory_mu);
  const auto* p = static_cast<const std::byte*>(ptr);
  auto it = device_memory.upper_bound(p);
  if (it != device_memory.begin()) {
    --it;
    if (p < it->first + it->second.bytes) {
      a->type = cudaMemoryTypeDevice;
      a->device = it->second.device;
      a->devicePointer = const_cast<void*>(ptr);
    }
  }
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostAlloc(void** p, size_t size, unsigned int) {
  *p = std::malloc(std::max<std::size_t>(size, 1));
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t CUDARTAPI cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  auto st = std::make_shared<stream_state>();
  *s = reinterpret_cast<cudaStream_t>(st.get());
  std::lock_guard lock(handles_mu);
  streams[st.get()] = st;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t s) {
  std::shared_ptr<stream_state> st;
  {
    std::lock_guard lock(handles_mu);
    auto it = streams.find(s);
    if (it == streams.end()) return cudaErrorInvalidResourceHandle;
    st = std::move(it->second);
    streams.erase(it);
  }
  return cudaSuccess;  // st's destructor runs what is queued, then joins
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t s) {
  if (s == nullptr) return cudaSuccess;
  std::shared_ptr<stream_state> st;
  {
    std::lock_guard lock(handles_mu);
    auto it = streams.find(s);
    if (it == streams.end()) return cudaErrorInvalidResourceHandle;
    st = it->second;
  }
  return st->idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  auto ev = std::make_shared<event_state>();
  *e = reinterpret_cast<cudaEvent_t>(ev.get());
  std::lock_guard lock(handles_mu);
  events[ev.get()] = ev;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard lock(handles_mu);
  return events.erase(e) == 1 ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  auto ev = event_of(e);
  if (!ev) return cudaErrorInvalidResourceHandle;
  std::uint64_t generation;
  {
    std::lock_guard lock(ev->mu);
    generation = ++ev->recorded;
  }
  return enqueue(s, [ev, generation] {
    {
      std::lock_guard lock(ev->mu);
      ev->completed = std::max(ev->completed, generation);
    }
    ev->cv.notify_all();
  });
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t e) {
  auto ev = event_of(e);
  if (!ev) return cudaErrorInvalidResourceHandle;
  std::lock_guard lock(ev->mu);
  return ev->completed >= ev->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  auto ev = event_of(e);
  if (!ev) return cudaErrorInvalidResourceHandle;
  std::uint64_t generation;
  {
    std::lock_guard lock(ev->mu);
    generation = ev->recorded;
  }
  return enqueue(s, [ev, generation] {
    std::unique_lock lock(ev->mu);
    ev->cv.wait(lock, [&] { return ev->completed >= generation; });
  });
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind,
                                      cudaStream_t s) {
  return enqueue(s, [=] { std::memcpy(dst, src, count); });
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t s) {
  return enqueue(s, [=] { std::memset(dst, value, count); });
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user) {
  return enqueue(s, [=] { fn(user); });
}

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
  c->device = current_device;
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
ncclResult_t add(ncclComm_t comm, queued_op op, cudaStream_t s) {
  auto c = comm_of(comm);
  if (!c) return ncclInvalidArgument;
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
