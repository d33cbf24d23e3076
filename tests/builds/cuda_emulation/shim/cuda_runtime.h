// A host stand-in for the CUDA runtime, so that jaccl's kernels, peer-path schedules and CUDA
// handlers run on a machine without a GPU (tests only; never part of the package).
//
// Contract: device memory is shared host memory (every pointer is valid everywhere in the
// process, and an IPC handle opens an allocation in another process of the host). A created
// stream (and the stream XLA hands a handler) is a queue run in order by a thread of its own,
// so enqueueing returns at once and work happens later, as on a GPU; the legacy stream 0 runs
// work on the calling thread before returning. A stream belongs to the device current when it
// was made (stream 0 to the thread's current device).
// A kernel launch runs the grid's blocks one after the other; a block's threads are fibers
// (ucontext) on the launching thread, switched only where a GPU thread could wait:
// __syncthreads(), __nanosleep() and a trap. So kernels that spin on flags written by other
// emulated GPUs, and blocks that synchronise, behave as on the device; __shared__ variables
// are per host thread (one block runs at a time on it). __trap() ends the launch and marks
// the device's emulated context lost: later launches, copies and sets on its streams do
// nothing and report cudaErrorLaunchFailure, as a real context would once the trap is seen.
// Launches are written emulate_launch(grid, block, shared, stream, kernel, args...) (the test
// build rewrites the <<<...>>> syntax into that).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

using std::max;
using std::min;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
struct cudaIpcMemHandle_t {
  char reserved[64];
};
constexpr unsigned cudaHostAllocPortable = 1, cudaHostAllocMapped = 2;
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventBlockingSync = 1, cudaEventDisableTiming = 2;
constexpr unsigned cudaIpcMemLazyEnablePeerAccess = 1;

namespace jaccl_emu {

extern thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

constexpr int kMaxDevices = 64;

// The device a stream belongs to, and whether its context trapped.
int device_of(cudaStream_t stream);
bool context_lost(cudaStream_t stream = nullptr);
bool lost_device(int device);
void mark_lost(int device);  // a trap
// Forgets the lost context of the thread's current device (a test that starts it afresh),
// or of every device.
void reset_context();
void reset_all_contexts();
int64_t now_ns();
// The stream XLA gives a handler of device `ordinal` (one per device).
cudaStream_t xla_stream(int ordinal);
// Runs `op` in `stream`'s order (stream 0: now, on this thread); refused once the stream's
// device lost its context. Ops of a stream whose device traps meanwhile are skipped.
cudaError_t submit(cudaStream_t stream, std::function<void()> op);

// Fiber machinery (fibers.cc): runs body(state) as every lane of every block of a grid of
// `device` (whose context a trap loses).
using LaneBody = void (*)(void* state);
void run_grid(int device, dim3 grid, dim3 block, LaneBody body, void* state);
void yield_lane();            // __nanosleep: let the block's other lanes (and other GPUs) run
void sync_lanes();            // __syncthreads
[[noreturn]] void trap_lane();  // __trap

template <typename Kernel, typename Tuple>
struct Launch {
  Kernel kernel;
  Tuple args;
  static void lane(void* self) {
    auto* l = static_cast<Launch*>(self);
    std::apply(l->kernel, l->args);
  }
};

// Arguments are copied at launch, as CUDA copies kernel parameters.
template <typename Kernel, typename... Args>
cudaError_t launch(dim3 grid, dim3 block, size_t /*shared*/, cudaStream_t stream, Kernel kernel,
                   Args... args) {
  using L = Launch<Kernel, std::tuple<Args...>>;
  auto l = std::make_shared<L>(L{kernel, std::tuple<Args...>(args...)});
  const int device = device_of(stream);
  return submit(stream, [l, grid, block, device] { run_grid(device, grid, block, &L::lane, l.get()); });
}

}  // namespace jaccl_emu

using jaccl_emu::blockDim;
using jaccl_emu::blockIdx;
using jaccl_emu::gridDim;
using jaccl_emu::threadIdx;

#define emulate_launch(...) ::jaccl_emu::launch(__VA_ARGS__)

// Host side of the emulated handlers (runtime.cc): waits until the stream of the thread's
// current device ran everything enqueued; false if that device's context trapped.
namespace jaccl_emu {
bool finish_current_device();
}

inline void __syncthreads() { jaccl_emu::sync_lanes(); }
inline void __nanosleep(unsigned) { jaccl_emu::yield_lane(); }
[[noreturn]] inline void __trap() { jaccl_emu::trap_lane(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline float __fmul_rn(float a, float b) { return a * b; }
// Cache-streaming loads and stores: plain accesses here.
template <typename T>
inline T __ldcs(const T* p) { return *p; }
template <typename T>
inline void __stcs(T* p, T v) { *p = v; }
inline float __fadd_rn(float a, float b) { return a + b; }

inline int atomicCAS(int* address, int compare, int value) {
  // Lanes of a block share one host thread; other GPUs' threads never touch these words.
  const int old = *address;
  if (old == compare) *address = value;
  return old;
}

// Emulated GPUs have 2 SMs holding 2 blocks each: a wave of 4 blocks, so that grid-stride
// kernels take many steps over the checks' sizes.
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
template <typename Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel, int, size_t) {
  *blocks = 2;
  return cudaSuccess;
}

cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaGetDeviceCount(int* count);  // JACCL_EMULATED_GPUS, default 4
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();  // the current device's XLA stream (stream 0 never waits)
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p);
cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle, unsigned flags);
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int device);
cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* bus);
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
