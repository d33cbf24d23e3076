// A host stand-in for the CUDA runtime, so that jaccl's kernels and peer-path schedules run
// on a machine without a GPU (tests only; never part of the package).
//
// Contract: each emulated GPU is one host thread with its own (always synchronous) stream.
// A kernel launch runs the grid's blocks one after the other; a block's threads are fibers
// (ucontext) on the launching thread, switched only where a GPU thread could wait:
// __syncthreads(), __nanosleep() and a trap. So kernels that spin on flags written by other
// emulated GPUs, and blocks that synchronise, behave as on the device; __shared__ variables
// are per host thread (one block runs at a time on it). __trap() ends the launch and marks
// the emulated context lost: later launches, copies and sets on that thread do nothing and
// report cudaErrorLaunchFailure, as a real context would once the trap is seen.
// Launches are written emulate_launch(grid, block, shared, stream, kernel, args...) (the test
// build rewrites the <<<...>>> syntax into that).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
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

namespace jaccl_emu {

extern thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

// Per emulated GPU (host thread): set once its context trapped.
bool context_lost();
// Forgets a lost context (a test that reuses the thread for a fresh GPU).
void reset_context();
int64_t now_ns();

// Fiber machinery (emulation.cc): runs fn(lane) for every lane of one block.
using LaneBody = void (*)(void* state);
void run_block(unsigned threads, LaneBody body, void* state);
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

template <typename Kernel, typename... Args>
cudaError_t launch(dim3 grid, dim3 block, size_t /*shared*/, cudaStream_t /*stream*/, Kernel kernel,
                   Args... args) {
  if (context_lost()) return cudaErrorLaunchFailure;
  Launch<Kernel, std::tuple<Args...>> l{kernel, std::tuple<Args...>(args...)};
  gridDim = grid;
  blockDim = block;
  for (unsigned b = 0; b < grid.x && !context_lost(); ++b) {
    blockIdx = dim3(b);
    run_block(block.x, &decltype(l)::lane, &l);
  }
  return context_lost() ? cudaErrorLaunchFailure : cudaSuccess;
}

}  // namespace jaccl_emu

using jaccl_emu::blockDim;
using jaccl_emu::blockIdx;
using jaccl_emu::gridDim;
using jaccl_emu::threadIdx;

#define emulate_launch(...) ::jaccl_emu::launch(__VA_ARGS__)

inline void __syncthreads() { jaccl_emu::sync_lanes(); }
inline void __nanosleep(unsigned) { jaccl_emu::yield_lane(); }
[[noreturn]] inline void __trap() { jaccl_emu::trap_lane(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

inline int atomicCAS(int* address, int compare, int value) {
  // Lanes of a block share one host thread; other GPUs' threads never touch these words.
  const int old = *address;
  if (old == compare) *address = value;
  return old;
}

cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);
