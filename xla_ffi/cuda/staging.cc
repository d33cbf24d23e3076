// Host jobs on XLA's stream. For every job the handler enqueues: an event (everything before
// it, the device-to-host copies included, is done), then a wait kernel polling the device's
// mapped word until it reaches the job's number. The worker thread of the device takes jobs in
// order, waits for each job's event, runs it, and publishes (number << 1 | failed) in one
// store, so the kernel never sees a number without its failure bit. The host-to-device copies
// of the results follow the wait kernel on the stream. Jobs of one device run in enqueue
// order; different devices have their own threads.
#include "cuda/staging.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <thread>

#include "cuda/kernels/kernels.h"
#include "cuda/stopped_context.h"


namespace jaccl::cuda {

namespace {

constexpr size_t kFirstStagingBytes = size_t{16} << 20;  // allocated at set-up

AbortHook abort_hook = nullptr;

struct Pending {
  cudaEvent_t ready = nullptr;
  uint64_t number = 0;
  HostJob job;
};

struct Staging {  // pinned memory of one stream
  char* host = nullptr;
  size_t bytes = 0;
};

}  // namespace

// Everything the staged path keeps per CUDA ordinal.
struct StagedDevice {
  int ordinal = 0;
  int64_t device = 0;
  std::mutex launch;                       // one call at a time fills staging and enqueues
  std::map<cudaStream_t, Staging> staging;
  std::vector<char*> retired;              // outgrown buffers: kept, work may still use them
  Staging spare;                           // allocated at set-up, for the first stream
  HostSignal* signal_host = nullptr;       // mapped: the worker writes, the wait kernel reads
  HostSignal* signal_device = nullptr;
  uint64_t enqueued = 0;                   // jobs handed to the worker so far
  std::atomic<uint64_t> finished{0};       // jobs the worker completed
  std::mutex queue_mutex;                  // guards queue and error
  std::condition_variable wake;
  std::deque<Pending> queue;
  std::string error;
};

namespace {

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

int run_job(Pending& next, char* message, size_t len) {
  cudaError_t err = cudaEventSynchronize(next.ready);
  cudaEventDestroy(next.ready);
  if (err != cudaSuccess) {
    std::snprintf(message, len, "jaccl: waiting for a staged collective's input: %s",
                  cudaGetErrorString(err));
    return 1;
  }
  try {
    return next.job(message, len);
  } catch (const std::exception& e) {
    std::snprintf(message, len, "jaccl: internal error in a staged collective: %s", e.what());
  } catch (...) {
    std::snprintf(message, len, "jaccl: internal error in a staged collective");
  }
  return 1;
}

void work(StagedDevice* d) {
  cudaSetDevice(d->ordinal);
  for (;;) {
    Pending next;
    {
      std::unique_lock<std::mutex> lock(d->queue_mutex);
      d->wake.wait(lock, [&] { return !d->queue.empty(); });
      next = std::move(d->queue.front());
      d->queue.pop_front();
    }
    char message[4096] = {};
    const int failed = run_job(next, message, sizeof message) != 0 ? 1 : 0;
    if (failed) {
      std::fprintf(stderr, "jaccl: staged collective on GPU device %lld failed: %s\n",
                   static_cast<long long>(d->device), message);
      std::fflush(stderr);
      raise_abort(message);
      end_after_stopped_context(d->device);
      std::lock_guard<std::mutex> lock(d->queue_mutex);
      if (d->error.empty()) d->error = message;
    }
    const uint64_t previous_failure = d->signal_host->done & 1;
    __atomic_store_n(&d->signal_host->done, next.number << 1 | previous_failure | failed,
                     __ATOMIC_SEQ_CST);
    d->finished.store(next.number, std::memory_order_release);
  }
}

}  // namespace

Status cuda_error(cudaError_t err, const char* what) {
  return Status::Failure(ErrorKind::kInternal,
                         std::string("jaccl: ") + what + ": " + cudaGetErrorString(err));
}

Status global_device(int ordinal, int64_t* device) {
  StagedDevice* d = find(ordinal);
  if (d == nullptr) {
    return Status::Failure(ErrorKind::kFailedPrecondition, "jaccl: CUDA device " +
                           std::to_string(ordinal) + " is not in the jaccl world");
  }
  *device = d->device;
  return Status::Ok();
}

Status StagedCall::begin(int ordinal, cudaStream_t stream, size_t bytes, StagedCall* call) {
  StagedDevice* d = find(ordinal);
  if (d == nullptr || d->signal_host == nullptr) {
    return Status::Failure(ErrorKind::kInvalidArgument, "jaccl: CUDA device not set up for staging");
  }
  call->device_ = d;
  call->lock_ = std::unique_lock<std::mutex>(d->launch);
  call->stream_ = stream;
  Staging& s = d->staging[stream];
  if (s.host == nullptr && d->spare.host != nullptr) std::swap(s, d->spare);
  if (s.bytes < bytes) {
    // Rare (the buffer doubles): the allocation may synchronise, but every job before it is
    // already queued, so the stream drains without this thread.
    size_t grown = std::max(kFirstStagingBytes, s.bytes * 2);
    while (grown < bytes) grown *= 2;
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, grown, cudaHostAllocPortable);
    if (err != cudaSuccess) return cuda_error(err, "pinned staging memory");
    if (s.host != nullptr) d->retired.push_back(s.host);
    s.host = static_cast<char*>(p);
    s.bytes = grown;
  }
  call->host_ = s.host;
  return Status::Ok();
}

Status StagedCall::enqueue(HostJob job) {
  StagedDevice* d = device_;
  cudaGetLastError();  // an unrelated earlier error must not look like a failed launch
  Pending pending;
  cudaError_t err = cudaEventCreateWithFlags(&pending.ready, cudaEventDisableTiming | cudaEventBlockingSync);
  if (err == cudaSuccess) err = cudaEventRecord(pending.ready, stream_);
  if (err != cudaSuccess) {
    if (pending.ready != nullptr) cudaEventDestroy(pending.ready);
    return cuda_error(err, "recording a staged collective's input");
  }
  pending.number = d->enqueued + 1;
  pending.job = std::move(job);
  err = launch_wait_host(d->signal_device, pending.number, stream_);
  if (err != cudaSuccess) {  // not launched: nothing waits for this number
    cudaEventDestroy(pending.ready);
    return cuda_error(err, "enqueueing the wait for a staged collective");
  }
  d->enqueued = pending.number;
  {
    std::lock_guard<std::mutex> lock(d->queue_mutex);
    d->queue.push_back(std::move(pending));
  }
  d->wake.notify_one();
  return Status::Ok();
}

std::string pending_error(int ordinal) {
  StagedDevice* d = find(ordinal);
  if (d == nullptr) return "";
  std::lock_guard<std::mutex> lock(d->queue_mutex);
  return d->error;
}

bool any_pending_error() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const auto& [ordinal, d] : devices()) {
    std::lock_guard<std::mutex> device_lock(d->queue_mutex);
    if (!d->error.empty()) return true;
  }
  return false;
}

bool drain(double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    bool idle = true;
    {
      std::lock_guard<std::mutex> lock(registry_mutex);
      for (const auto& [ordinal, d] : devices()) {
        std::lock_guard<std::mutex> launch(d->launch);
        idle &= d->finished.load(std::memory_order_acquire) == d->enqueued;
      }
    }
    if (idle) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void raise_abort(const std::string& why) {
  if (abort_hook != nullptr) abort_hook(why.c_str());
}

void set_abort_hook(AbortHook hook) { abort_hook = hook; }

Status set_device_ids(const std::vector<std::pair<int, int64_t>>& ids) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const auto& [ordinal, id] : ids) {
    auto& d = devices()[ordinal];
    if (d) {
      d->device = id;
      continue;
    }
    d = std::make_unique<StagedDevice>();
    d->ordinal = ordinal;
    d->device = id;
    int saved = -1;
    if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
    cudaError_t err = cudaSetDevice(ordinal);
    void* p = nullptr;
    if (err == cudaSuccess) {
      err = cudaHostAlloc(&p, sizeof(HostSignal), cudaHostAllocMapped | cudaHostAllocPortable);
    }
    void* dp = nullptr;
    if (err == cudaSuccess) {
      std::memset(p, 0, sizeof(HostSignal));
      err = cudaHostGetDevicePointer(&dp, p, 0);
    }
    void* spare = nullptr;
    if (err == cudaSuccess) err = cudaHostAlloc(&spare, kFirstStagingBytes, cudaHostAllocPortable);
    // Back to the caller's device only if this process uses it (else it would gain a context).
    bool saved_is_ours = false;
    for (const auto& entry : ids) saved_is_ours |= entry.first == saved;
    if (saved_is_ours) cudaSetDevice(saved);
    if (err != cudaSuccess) {
      devices().erase(ordinal);
      return cuda_error(err, "mapped host memory for staged jobs");
    }
    d->signal_host = static_cast<HostSignal*>(p);
    d->signal_device = static_cast<HostSignal*>(dp);
    d->spare = Staging{static_cast<char*>(spare), kFirstStagingBytes};
    std::thread(work, d.get()).detach();
  }
  return Status::Ok();
}

}  // namespace jaccl::cuda
