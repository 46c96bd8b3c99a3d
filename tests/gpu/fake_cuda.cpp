// A CPU stand-in for the parts of the CUDA runtime and NCCL that bps::local::nccl calls, so
// that its pipeline (stage thread, order board, events, slices through the servers, failures)
// runs on machines with no GPU. Linked instead of libcudart and libnccl; only their headers are
// used. It is a model, not an emulator: "device memory" is host memory, each stream is a thread
// that runs its queue in order (so copies, events and host functions really are asynchronous),
// and a NCCL group is one task on the stream that waits, like a kernel, until every rank of the
// communicator reached the same group, then sums or copies. What it cannot show: real kernels,
// real device memory, NCCL's own behaviour. See fake_device.hpp for the knobs tests turn. This
// file is the runtime's half (memory, events, streams); fake_nccl.cpp is NCCL's.
#include "fake_device.hpp"
#include "fake_runtime.hpp"

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



}  // namespace fake_device

namespace fake_device::runtime {

int current_device() { return ::current_device; }

cudaError_t enqueue(cudaStream_t s, std::function<void()> f) { return ::enqueue(s, std::move(f)); }

}  // namespace fake_device::runtime

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
