// The staged path's machinery, shared by the collective and MoE CUDA handlers: which global
// device a CUDA ordinal is, pinned staging memory per device, and host jobs ordered on XLA's
// stream.
//
// Contract:
// - staging_memory() returns pinned host memory of at least `bytes` for the device; the
//   memory of one call may be reused by the next call enqueued on the same stream (growing it
//   drains the stream first, the only host synchronisation, and only on growth).
// - enqueue_host_job() enqueues, on `stream`: "when everything before this point is done, run
//   `job` on the device's own worker thread, and go on only after it returned". The stream
//   waits in a one-warp kernel polling a mapped host flag, never blocking CUDA's callback
//   thread, so two devices of a process cannot wait on each other through it. A job that
//   fails (non-zero, message in its buffer) has its message printed and kept for
//   pending_error(), and the waiting kernel traps: the context stops, so nothing later on it
//   consumes a wrong result.
// - dtype_of() translates element types; cuda_error() words a CUDA failure.
// - global_device() maps a CUDA ordinal to its global device id (set_device_ids), or returns
//   an error naming the ordinal.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl::cuda {

using HostJob = std::function<int(char* error, size_t error_len)>;

xla::ffi::Error cuda_error(cudaError_t err, const char* what);
// The engine's Dtype of an XLA element type; *ok = false for types the engine does not move.
Dtype dtype_of(xla::ffi::DataType type, bool* ok);
xla::ffi::Error global_device(int ordinal, int64_t* device);
xla::ffi::Error staging_memory(int ordinal, size_t bytes, cudaStream_t stream, char** host);
xla::ffi::Error enqueue_host_job(int ordinal, int64_t device, cudaStream_t stream, HostJob job);
std::string pending_error(int ordinal);  // "" while no host job of the device failed
bool any_pending_error();

void set_device_ids(const std::vector<std::pair<int, int64_t>>& ordinal_to_global);

}  // namespace jaccl::cuda
