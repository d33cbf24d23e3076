// The staged path's machinery, shared by the collective and MoE CUDA handlers: which global
// device a CUDA ordinal is, pinned staging memory per device and stream, and host jobs
// ordered on XLA's stream.
//
// Contract:
// - set_device_ids() registers this process's GPUs and prepares, for each, the mapped flag,
//   a first pinned staging buffer and the worker thread, so that the launch path allocates
//   pinned memory only when a call outgrows the buffer (then it doubles; retired buffers are
//   kept, never freed while work may use them).
// - A StagedCall holds the device's staging lock from begin() to its destruction: one call
//   at a time per device fills the buffer and enqueues. host() is pinned memory of at least
//   the requested bytes, owned by the call's stream until the next call on that stream.
// - enqueue() enqueues, on the stream: "when everything before this point is done, run `job`
//   on the device's own worker thread, and go on only after it returned". The stream waits in
//   a one-thread kernel polling a mapped host word, never blocking CUDA's callback thread, so
//   two devices of a process cannot wait on each other through it. A job that fails (non-zero,
//   message in its buffer, or an exception) has its message printed, posted on the engine's
//   abort board (peers stop) and kept for pending_error(); the waiting kernel then traps: the
//   context stops, so nothing later on it consumes a wrong result.
// - drain() waits (up to `timeout_s`) until every queued job has run: call before the engine
//   shuts down.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace jaccl::cuda {

using HostJob = std::function<int(char* error, size_t error_len)>;

Status cuda_error(cudaError_t err, const char* what);
Status global_device(int ordinal, int64_t* device);

struct StagedDevice;

class StagedCall {
 public:
  static Status begin(int ordinal, cudaStream_t stream, size_t bytes, StagedCall* call);
  char* host() const { return host_; }
  Status enqueue(HostJob job);

 private:
  StagedDevice* device_ = nullptr;
  std::unique_lock<std::mutex> lock_;
  cudaStream_t stream_ = nullptr;
  char* host_ = nullptr;
};

std::string pending_error(int ordinal);  // "" while no host job of the device failed
bool any_pending_error();
bool drain(double timeout_s);

// Tells the peers through the engine's abort board (set by set_abort_hook).
void raise_abort(const std::string& why);
using AbortHook = void (*)(const char* why);  // posts `why` on the engine's abort board
void set_abort_hook(AbortHook hook);

Status set_device_ids(const std::vector<std::pair<int, int64_t>>& ordinal_to_global);

}  // namespace jaccl::cuda
