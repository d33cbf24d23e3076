// cuda_runtime.h's runtime calls: memory, devices, events, IPC handles and streams.
//
// Device memory (cudaMalloc) is a shared mapping of a memfd, so that an IPC handle (pid, fd,
// size) opens it in another process through /proc/<pid>/fd: processes of one host read each
// other's workspaces as CUDA IPC lets them. A created stream owns a thread that runs its
// queue in order; `submitted` and `completed` count its operations, so synchronising on a
// stream or an event is waiting until `completed` reaches a number taken when the call was
// made. An operation whose device's context trapped is skipped (counted, not run).
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "cuda_runtime.h"

struct CUstream_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> ops;
  uint64_t submitted = 0, completed = 0;
  bool started = false, stopping = false;
  std::thread worker;
};

struct CUevent_st {
  CUstream_st* stream = nullptr;  // null: complete
  uint64_t ticket = 0;
  int device = 0;
  std::atomic<int64_t> time_ns{0};  // when the stream reached the event
};

namespace jaccl_emu {
namespace {

thread_local int current_device = 0;
std::atomic<bool> lost[kMaxDevices];
CUstream_st* const xla_streams = new CUstream_st[kMaxDevices];  // never destroyed

// Ordinals are XLA's device ids (sparse across processes); each gets a slot on first use.
int slot(int device) {
  static std::mutex mutex;
  static auto* slots = new std::map<int, int>;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = slots->find(device);
  if (found != slots->end()) return found->second;
  const int next = static_cast<int>(slots->size());
  if (next >= kMaxDevices) {
    std::fprintf(stderr, "emulated GPUs: more than %d devices\n", kMaxDevices);
    std::abort();
  }
  (*slots)[device] = next;
  return next;
}

void run_stream(CUstream_st* s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->changed.wait(lock, [s] { return !s->ops.empty() || s->stopping; });
    if (s->ops.empty()) return;
    std::function<void()> op = std::move(s->ops.front());
    s->ops.pop_front();
    lock.unlock();
    current_device = s->device;
    if (!lost_device(s->device)) op();
    lock.lock();
    ++s->completed;
    s->changed.notify_all();
  }
}

// Waits until `s` completed operation number `ticket`.
void wait_for(CUstream_st* s, uint64_t ticket) {
  std::unique_lock<std::mutex> lock(s->mutex);
  s->changed.wait(lock, [s, ticket] { return s->completed >= ticket; });
}

uint64_t submitted(CUstream_st* s) {
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->submitted;
}

}  // namespace

int device_of(cudaStream_t stream) { return stream != nullptr ? stream->device : current_device; }
bool lost_device(int device) { return lost[slot(device)].load(); }
void mark_lost(int device) { lost[slot(device)] = true; }
bool context_lost(cudaStream_t stream) { return lost_device(device_of(stream)); }
void reset_context() { lost[slot(current_device)] = false; }
void reset_all_contexts() {
  for (auto& l : lost) l = false;
}

int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

cudaStream_t xla_stream(int ordinal) {
  CUstream_st* s = &xla_streams[slot(ordinal)];
  s->device = ordinal;
  return s;
}

cudaError_t submit(cudaStream_t stream, std::function<void()> op) {
  if (context_lost(stream)) return cudaErrorLaunchFailure;
  if (stream == nullptr) {
    op();
    return context_lost(stream) ? cudaErrorLaunchFailure : cudaSuccess;
  }
  std::lock_guard<std::mutex> lock(stream->mutex);
  if (!stream->started) {
    stream->worker = std::thread(run_stream, stream);
    stream->worker.detach();
    stream->started = true;
  }
  stream->ops.push_back(std::move(op));
  ++stream->submitted;
  stream->changed.notify_all();
  return cudaSuccess;
}

bool finish_current_device() {
  CUstream_st* s = xla_stream(current_device);
  wait_for(s, submitted(s));
  return !lost_device(current_device);
}

}  // namespace jaccl_emu

using jaccl_emu::context_lost;
using jaccl_emu::submit;

namespace {

int emulated_devices() {
  const char* v = std::getenv("JACCL_EMULATED_GPUS");
  return v != nullptr ? std::atoi(v) : 4;
}

void* aligned_bytes(size_t bytes) {
  void* p = nullptr;
  return posix_memalign(&p, 256, std::max<size_t>(bytes, 1)) == 0 ? p : nullptr;
}

struct Mapping {
  int fd;
  size_t bytes;
};

std::mutex mappings_mutex;
std::map<void*, Mapping>& mappings() {  // device allocations of this process
  static auto* m = new std::map<void*, Mapping>;
  return *m;
}

struct IpcHandle {
  int64_t pid;
  int64_t fd;
  uint64_t bytes;
};
static_assert(sizeof(IpcHandle) <= sizeof(cudaIpcMemHandle_t), "handle too small");

cudaError_t sticky(cudaStream_t stream) { return context_lost(stream) ? cudaErrorLaunchFailure : cudaSuccess; }

}  // namespace

cudaError_t cudaGetLastError() { return sticky(nullptr); }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  return submit(stream, [=] { if (bytes > 0) std::memcpy(dst, src, bytes); });
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  return submit(stream, [=] { if (bytes > 0) std::memset(dst, value, bytes); });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) { return cudaMemsetAsync(dst, value, bytes, nullptr); }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emulated_devices();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0) return cudaErrorInvalidDevice;
  jaccl_emu::current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = jaccl_emu::current_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (attr != cudaDevAttrMultiProcessorCount || device < 0) return cudaErrorInvalidValue;
  *value = 2;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  const int fd = memfd_create("jaccl-emulated-gpu", MFD_CLOEXEC);
  if (fd < 0) return cudaErrorMemoryAllocation;
  void* m = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (m == MAP_FAILED) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  std::lock_guard<std::mutex> lock(mappings_mutex);
  mappings()[m] = Mapping{fd, bytes};
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  std::lock_guard<std::mutex> lock(mappings_mutex);
  auto found = mappings().find(p);
  if (found == mappings().end()) return cudaErrorInvalidValue;
  munmap(p, found->second.bytes);
  close(found->second.fd);
  mappings().erase(found);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = aligned_bytes(bytes);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned) {
  *device = host;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new CUstream_st;
  (*stream)->device = jaccl_emu::current_device;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream != nullptr) jaccl_emu::wait_for(stream, jaccl_emu::submitted(stream));
  return sticky(stream);
}

cudaError_t cudaDeviceSynchronize() {
  return jaccl_emu::finish_current_device() ? cudaSuccess : cudaErrorLaunchFailure;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  // As CUDA does, the stream's queued work still runs; its thread then ends.
  if (stream == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    if (stream->started) {
      stream->stopping = true;  // the thread ends once the queue is empty; the stream leaks
      stream->changed.notify_all();
      return cudaSuccess;
    }
  }
  delete stream;  // never ran anything: no thread refers to it
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  (*event)->device = jaccl_emu::current_device;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) { return cudaEventCreate(event); }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  event->stream = stream;
  event->device = jaccl_emu::device_of(stream);
  const cudaError_t err = submit(stream, [event] { event->time_ns = jaccl_emu::now_ns(); });
  event->ticket = stream != nullptr ? jaccl_emu::submitted(stream) : 0;
  return err;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event->stream != nullptr) jaccl_emu::wait_for(event->stream, event->ticket);
  return jaccl_emu::lost_device(event->device) ? cudaErrorLaunchFailure : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  *ms = static_cast<float>(stop->time_ns.load() - start->time_ns.load()) / 1e6f;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p) {
  std::lock_guard<std::mutex> lock(mappings_mutex);
  auto found = mappings().find(p);
  if (found == mappings().end()) return cudaErrorInvalidValue;  // not the base of an allocation
  const IpcHandle h{getpid(), found->second.fd, found->second.bytes};
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle, unsigned) {
  IpcHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.pid == getpid()) return cudaErrorInvalidValue;  // as CUDA: not in the exporting process
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return cudaErrorInvalidValue;
  void* m = mmap(nullptr, h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return cudaErrorInvalidValue;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int device) {
  std::snprintf(bus, static_cast<size_t>(len), "0000:%02x:00.0", device + 1);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* bus) {
  unsigned domain = 0, number = 0;
  if (std::sscanf(bus, "%x:%x", &domain, &number) != 2 || number == 0) {
    return cudaErrorInvalidDevice;
  }
  *device = static_cast<int>(number) - 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int, int) {
  *can = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return cudaSuccess; }
