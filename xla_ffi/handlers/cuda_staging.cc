// Host jobs on XLA's stream. For every job the handler enqueues: an event (everything before
// it, the device-to-host copies included, is done), then a wait kernel polling the device's
// mapped "done" counter until it reaches the job's number. The worker thread of the device
// takes jobs in order, waits for each job's event, runs it, and publishes its number (and a
// failure bit). The host-to-device copies of the results follow the wait kernel on the
// stream. Jobs of one device run in enqueue order; different devices have their own threads.
#include "handlers/cuda_staging.h"

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "cuda/kernels.h"

namespace ffi = xla::ffi;

namespace jaccl::cuda {
namespace {

struct Pending {
  cudaEvent_t ready;
  uint64_t number;
  HostJob job;
};

// Everything the staged path keeps per CUDA ordinal.
struct StagedDevice {
  int ordinal = 0;
  int64_t device = 0;
  char* staging = nullptr;  // pinned
  size_t staging_bytes = 0;
  HostSignal* signal_host = nullptr;    // mapped: the worker writes, the wait kernel reads
  HostSignal* signal_device = nullptr;
  uint64_t enqueued = 0;                // jobs handed to the worker so far
  std::mutex mutex;                     // guards the queue and error
  std::condition_variable wake;
  std::deque<Pending> queue;
  std::string error;
  bool worker_started = false;
};

std::mutex registry_mutex;
std::map<int, std::unique_ptr<StagedDevice>>& devices() {
  static auto* d = new std::map<int, std::unique_ptr<StagedDevice>>;  // outlives the workers
  return *d;
}

StagedDevice* find(int ordinal) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto found = devices().find(ordinal);
  return found == devices().end() ? nullptr : found->second.get();
}

void work(StagedDevice* d) {
  cudaSetDevice(d->ordinal);
  for (;;) {
    Pending next;
    {
      std::unique_lock<std::mutex> lock(d->mutex);
      d->wake.wait(lock, [&] { return !d->queue.empty(); });
      next = std::move(d->queue.front());
      d->queue.pop_front();
    }
    char message[4096] = {};
    int failed = 0;
    cudaError_t err = cudaEventSynchronize(next.ready);
    cudaEventDestroy(next.ready);
    if (err != cudaSuccess) {
      std::snprintf(message, sizeof message, "jaccl: waiting for a staged collective's input: %s",
                    cudaGetErrorString(err));
      failed = 1;
    } else if (next.job(message, sizeof message) != 0) {
      failed = 1;
    }
    if (failed) {
      std::fprintf(stderr, "jaccl: staged collective on GPU device %lld failed: %s\n",
                   static_cast<long long>(d->device), message);
      std::fflush(stderr);
      std::lock_guard<std::mutex> lock(d->mutex);
      if (d->error.empty()) d->error = message;
      d->signal_host->failed = 1;
    }
    __sync_synchronize();
    d->signal_host->done = next.number;
  }
}

// Call without registry_mutex held.
ffi::Error prepare(StagedDevice* d) {
  if (d->signal_host != nullptr) return ffi::Error::Success();
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, sizeof(HostSignal), cudaHostAllocMapped | cudaHostAllocPortable);
  if (err != cudaSuccess) return cuda_error(err, "mapped host memory for staged jobs");
  std::memset(p, 0, sizeof(HostSignal));
  void* dp = nullptr;
  err = cudaHostGetDevicePointer(&dp, p, 0);
  if (err != cudaSuccess) return cuda_error(err, "device view of the staged-job flag");
  d->signal_host = static_cast<HostSignal*>(p);
  d->signal_device = static_cast<HostSignal*>(dp);
  return ffi::Error::Success();
}

}  // namespace

Dtype dtype_of(ffi::DataType type, bool* ok) {
  *ok = true;
  switch (type) {
    case ffi::DataType::PRED: return Dtype::kBool;
    case ffi::DataType::S8: return Dtype::kI8;
    case ffi::DataType::S16: return Dtype::kI16;
    case ffi::DataType::S32: return Dtype::kI32;
    case ffi::DataType::S64: return Dtype::kI64;
    case ffi::DataType::U8: return Dtype::kU8;
    case ffi::DataType::U16: return Dtype::kU16;
    case ffi::DataType::U32: return Dtype::kU32;
    case ffi::DataType::U64: return Dtype::kU64;
    case ffi::DataType::F16: return Dtype::kF16;
    case ffi::DataType::BF16: return Dtype::kBF16;
    case ffi::DataType::F32: return Dtype::kF32;
    case ffi::DataType::F64: return Dtype::kF64;
    default: *ok = false; return Dtype::kF32;
  }
}

ffi::Error cuda_error(cudaError_t err, const char* what) {
  return ffi::Error(ffi::ErrorCode::kInternal,
                    std::string("jaccl: ") + what + ": " + cudaGetErrorString(err));
}

ffi::Error global_device(int ordinal, int64_t* device) {
  StagedDevice* d = find(ordinal);
  if (d == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaccl: CUDA device " + std::to_string(ordinal) + " is not in the jaccl world");
  }
  *device = d->device;
  return ffi::Error::Success();
}

ffi::Error staging_memory(int ordinal, size_t bytes, cudaStream_t stream, char** host) {
  StagedDevice* d = find(ordinal);
  if (d == nullptr) return ffi::Error::InvalidArgument("jaccl: unknown CUDA device");
  if (d->staging_bytes < bytes) {
    cudaError_t err = cudaStreamSynchronize(stream);  // the old buffer may still be in use
    if (err == cudaSuccess && d->staging != nullptr) err = cudaFreeHost(d->staging);
    d->staging = nullptr;
    d->staging_bytes = 0;
    void* p = nullptr;
    if (err == cudaSuccess) err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) return cuda_error(err, "pinned staging memory");
    d->staging = static_cast<char*>(p);
    d->staging_bytes = bytes;
  }
  *host = d->staging;
  return ffi::Error::Success();
}

ffi::Error enqueue_host_job(int ordinal, int64_t device, cudaStream_t stream, HostJob job) {
  StagedDevice* d = find(ordinal);
  if (d == nullptr) return ffi::Error::InvalidArgument("jaccl: unknown CUDA device");
  if (ffi::Error prepared = prepare(d); prepared.failure()) return prepared;
  Pending pending;
  cudaError_t err = cudaEventCreateWithFlags(&pending.ready, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(pending.ready, stream);
  if (err != cudaSuccess) return cuda_error(err, "recording a staged collective's input");
  pending.number = ++d->enqueued;
  pending.job = std::move(job);
  err = launch_wait_host(d->signal_device, pending.number, stream);
  if (err != cudaSuccess) return cuda_error(err, "enqueueing the wait for a staged collective");
  {
    std::lock_guard<std::mutex> lock(d->mutex);
    d->queue.push_back(std::move(pending));
    if (!d->worker_started) {
      std::thread(work, d).detach();
      d->worker_started = true;
    }
  }
  d->wake.notify_one();
  return ffi::Error::Success();
}

std::string pending_error(int ordinal) {
  StagedDevice* d = find(ordinal);
  if (d == nullptr) return "";
  std::lock_guard<std::mutex> lock(d->mutex);
  return d->error;
}

bool any_pending_error() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const auto& [ordinal, d] : devices()) {
    std::lock_guard<std::mutex> device_lock(d->mutex);
    if (!d->error.empty()) return true;
  }
  return false;
}

void set_device_ids(const std::vector<std::pair<int, int64_t>>& ids) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const auto& [ordinal, id] : ids) {
    auto& d = devices()[ordinal];
    if (!d) d = std::make_unique<StagedDevice>();
    d->ordinal = ordinal;
    d->device = id;
  }
}

}  // namespace jaccl::cuda
