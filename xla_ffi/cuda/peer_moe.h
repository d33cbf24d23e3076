// The MoE ops on the peer path: rows move GPU to GPU through the staging areas of the group,
// every list read on the device, on XLA's stream, no host round trip.
//
// Contract: peer_moe_fits() says whether a call fits the staging area (the answer depends on
// static shapes and the staging size only, so it is the same on every rank); the caller
// stages through the host otherwise. run_peer_moe() enqueues the whole op and returns the
// first launch error (the device is then broken). The results are bitwise those of the CPU
// path: dispatch places rows exactly as moe_dispatch does (padding zero); the combine sums in
// k order in float32 with separate roundings (the kernels of moe_peer_kernels.h, kernels.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "cuda/peers.h"

namespace jaccl::cuda {

struct PeerMoeCall {
  bool combine = false;             // false: dispatch
  Dtype dtype = Dtype::kF32;
  const char* rows = nullptr;       // rows to send (x or y)
  size_t rows_count = 0, row_bytes = 0;
  const int32_t* lists[4] = {};     // send rows, send offsets, receive rows/pairs, receive offsets
  size_t send_capacity = 0, recv_capacity = 0;
  // dispatch
  const int32_t* topk_idx = nullptr;
  size_t topk_count = 0;
  int64_t num_experts = 0;
  // combine
  const float* weights = nullptr;   // weighted sum
  const void* dout = nullptr;       // pair_dot
  size_t tokens = 0, topk = 0;
  void* out = nullptr;
  size_t out_rows = 0, out_bytes = 0;
  uint32_t site = 0;                // common/call_sites.h; ranks must agree
};

bool peer_moe_fits(const LocalDevice& me, const PeerMoeCall& call);

cudaError_t run_peer_moe(LocalDevice& me, const std::vector<int64_t>& members, int rank,
                         const PeerMoeCall& call, cudaStream_t stream);

}  // namespace jaccl::cuda
