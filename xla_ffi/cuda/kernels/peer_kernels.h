// Kernels of the peer path: GPUs of one host that read each other's workspaces (CUDA IPC or
// peer access) and synchronise through flags in device memory, never through the host.
//
// Contract: launchers enqueue on `stream` and return the launch error; nothing blocks the
// host. A barrier that fails (a peer too slow past the deadline, a peer process dead, ranks
// disagreeing on the call, a peer that failed first) writes what happened into the device's
// DeviceStatus (mapped host memory), raises the abort word of every peer of the group (so
// they stop at once instead of waiting out the deadline) and traps: the CUDA context stops,
// so no later work on it can consume a wrong result, and the host reads the reason from the
// status.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/kernels.h"

namespace jaccl::cuda {

constexpr int kMaxPeers = kMaxOperands;
constexpr int kDescriptorWords = 8;

enum PeerError : int32_t {
  kPeerOk = 0,
  kPeerTimeout = 1,
  kPeerMismatch = 2,
  kPeerDead = 3,
  kPeerAborted = 4,  // a peer failed first (DeviceStatus::device says which)
  kPeerBroken = 5,   // the host could not enqueue a peer collective
  kPeerBadExpert = 6,  // moe_dispatch: an expert id out of range (rank = index, device = id)
};

// Written by a failing barrier, read by the host (mapped, pinned host memory).
struct DeviceStatus {
  volatile int32_t error;    // PeerError
  volatile int32_t rank;     // the group rank the failure concerns
  volatile int64_t device;   // its global device id
  volatile uint64_t mine[kDescriptorWords];
  volatile uint64_t theirs[kDescriptorWords];
};

// One barrier of a group: signal every peer, wait for every peer's signal. Start barriers
// also publish this rank's call descriptor and compare it with every peer's.
struct BarrierArgs {
  int n = 0;                                  // group size (<= kMaxPeers)
  int rank = 0;                               // mine
  uint64_t* signal[kMaxPeers] = {};           // peer q's flag slot for me (null for me)
  const uint64_t* arrived[kMaxPeers] = {};    // my flag slot for peer q (null for me)
  uint64_t value[kMaxPeers] = {};             // the count both sides reach at this barrier
  int64_t device[kMaxPeers] = {};             // peer q's global device id
  const volatile uint8_t* dead = nullptr;     // per process: 1 once the host saw it die
  int32_t process[kMaxPeers] = {};            // peer q's process index
  int64_t* abort_peer[kMaxPeers] = {};        // peer q's abort word (null for me)
  const int64_t* aborted = nullptr;           // mine: 1 + the device that failed first
  int64_t self = 0;                           // my global device id
  bool check = false;                         // start barrier: compare descriptors
  uint64_t* my_descriptor = nullptr;          // in my workspace
  const uint64_t* descriptor[kMaxPeers] = {}; // peer q's, in its workspace
  uint64_t call[kDescriptorWords] = {};       // this call's descriptor
  uint64_t timeout_ns = 0;
  DeviceStatus* status = nullptr;             // device view of the mapped status
};

cudaError_t launch_barrier(const BarrierArgs& args, cudaStream_t stream);

// Elements of an array seen through a block layout: element i of the view is at
// base + ((first + i) / strip * stride + (first + i) % strip) * elem_bytes, or at
// base + (first + i) * elem_bytes when strip == 0 (contiguous).
struct StridedView {
  char* base = nullptr;
  size_t strip = 0;
  size_t stride = 0;
  size_t first = 0;
};

// dst view[i] = src view[i] for i < count (a cudaMemcpyAsync when both are contiguous).
cudaError_t launch_strided_copy(const StridedView& dst, const StridedView& src, size_t count,
                                size_t elem_bytes, cudaStream_t stream);

}  // namespace jaccl::cuda
