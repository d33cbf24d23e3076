// Peer-path kernels.
//
// Barrier: one warp; lane q < n looks after peer q. Lane q makes everything this device wrote
// before the barrier visible system-wide, stores the agreed count into peer q's flag slot
// for this device, then polls its own slot for peer q until the same count arrives. Counts
// only grow, one per barrier of the pair, and both sides run the pair's barriers in the same
// (program) order, so "slot >= count" means "peer q reached this barrier". While polling,
// the lane watches the deadline (the GPU's global timer) and the host's list of dead
// processes. A start barrier first publishes this call's descriptor in the workspace and,
// once every peer arrived, compares theirs with it. Any failure is written to the mapped
// status by the first lane to see one, and the kernel traps.
//
// Strided copy: grid-stride loop over elements, one element per step, the element moved
// as an integer of its size.
#include <cstdint>

#include "cuda/kernels/peer_kernels.h"

namespace jaccl::cuda {
namespace {

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The first failing lane reports and traps; any other waits for the trap.
__device__ void fail(const BarrierArgs& a, int* claimed, PeerError error, int q, int64_t device,
                     const uint64_t* theirs) {
  if (atomicCAS(claimed, 0, 1) != 0) {
    for (;;) __nanosleep(1000);
  }
  const bool reported = a.status->error != kPeerOk;  // e.g. a bad expert id, found earlier
  if (!reported) {
    a.status->rank = q;
    a.status->device = device;
    for (int i = 0; i < kDescriptorWords; ++i) {
      a.status->mine[i] = a.call[i];
      a.status->theirs[i] = theirs != nullptr ? theirs[i] : 0;
    }
  }
  for (int p = 0; p < a.n; ++p) {
    if (a.abort_peer[p] != nullptr && !(a.dead != nullptr && a.dead[a.process[p]])) {
      *reinterpret_cast<volatile int64_t*>(a.abort_peer[p]) = a.self + 1;
    }
  }
  __threadfence_system();
  if (!reported) a.status->error = error;
  __threadfence_system();
  __trap();
}

__global__ void barrier_kernel(BarrierArgs a) {
  __shared__ int claimed;
  const int q = threadIdx.x;
  if (q == 0) {
    claimed = 0;
    if (a.check) {
      for (int i = 0; i < kDescriptorWords; ++i) a.my_descriptor[i] = a.call[i];
    }
    __threadfence_system();
  }
  __syncthreads();
  __threadfence_system();
  const bool peer = q < a.n && q != a.rank;
  const volatile int64_t* aborted = a.aborted;
  if (q == a.rank && *aborted != 0) fail(a, &claimed, kPeerAborted, q, *aborted - 1, nullptr);
  if (peer) {
    if (*aborted != 0) fail(a, &claimed, kPeerAborted, q, *aborted - 1, nullptr);
    if (a.dead != nullptr && a.dead[a.process[q]]) fail(a, &claimed, kPeerDead, q, a.device[q], nullptr);
    *reinterpret_cast<volatile uint64_t*>(a.signal[q]) = a.value[q];
    const volatile uint64_t* slot = a.arrived[q];
    const uint64_t start = global_time_ns();
    uint32_t spins = 0;
    while (*slot < a.value[q]) {
      if ((++spins & 255) == 0) {
        if (*aborted != 0) fail(a, &claimed, kPeerAborted, q, *aborted - 1, nullptr);
        if (a.dead != nullptr && a.dead[a.process[q]]) fail(a, &claimed, kPeerDead, q, a.device[q], nullptr);
        if (global_time_ns() - start > a.timeout_ns) fail(a, &claimed, kPeerTimeout, q, a.device[q], nullptr);
      }
      __nanosleep(64);
    }
  }
  __syncthreads();
  __threadfence_system();
  // Failures are sticky: once a peer (or this device, before the barrier) raised the abort
  // word, every barrier fails, even one whose peers all arrived.
  if (q < a.n && *aborted != 0) fail(a, &claimed, kPeerAborted, q, *aborted - 1, nullptr);
  if (peer && a.check) {
    const volatile uint64_t* theirs = a.descriptor[q];
    uint64_t copy[kDescriptorWords];
    bool same = true;
    for (int i = 0; i < kDescriptorWords; ++i) {
      copy[i] = theirs[i];
      same &= copy[i] == a.call[i];
    }
    if (!same) fail(a, &claimed, kPeerMismatch, q, a.device[q], copy);
  }
}

template <typename T>
__global__ void strided_copy_kernel(StridedView dst, StridedView src, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    const size_t s = src.first + i, d = dst.first + i;
    const size_t from = src.strip == 0 ? s : s / src.strip * src.stride + s % src.strip;
    const size_t to = dst.strip == 0 ? d : d / dst.strip * dst.stride + d % dst.strip;
    reinterpret_cast<T*>(dst.base)[to] = reinterpret_cast<const T*>(src.base)[from];
  }
}

}  // namespace

cudaError_t launch_barrier(const BarrierArgs& args, cudaStream_t stream) {
  if (args.n < 1 || args.n > kMaxPeers || args.n > 32) return cudaErrorInvalidValue;
  barrier_kernel<<<1, 32, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t launch_strided_copy(const StridedView& dst, const StridedView& src, size_t count,
                                size_t elem_bytes, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dst.strip == 0 && src.strip == 0) {
    return cudaMemcpyAsync(dst.base + dst.first * elem_bytes, src.base + src.first * elem_bytes,
                           count * elem_bytes, cudaMemcpyDefault, stream);
  }
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((count + threads - 1) / threads, 132 * 8));
  switch (elem_bytes) {
    case 1: strided_copy_kernel<uint8_t><<<blocks, threads, 0, stream>>>(dst, src, count); break;
    case 2: strided_copy_kernel<uint16_t><<<blocks, threads, 0, stream>>>(dst, src, count); break;
    case 4: strided_copy_kernel<uint32_t><<<blocks, threads, 0, stream>>>(dst, src, count); break;
    case 8: strided_copy_kernel<uint64_t><<<blocks, threads, 0, stream>>>(dst, src, count); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace jaccl::cuda
