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

#include "cuda/peers.h"
#include "moe/request.h"

namespace jaccl::cuda {

// `call`: a checked request (moe/request.h) of device buffers, its site agreed by the ranks.
bool peer_moe_fits(const LocalDevice& me, const MoeRequest& call);

cudaError_t run_peer_moe(LocalDevice& me, const std::vector<int64_t>& members, int rank,
                         const MoeRequest& call, cudaStream_t stream);

}  // namespace jaccl::cuda
