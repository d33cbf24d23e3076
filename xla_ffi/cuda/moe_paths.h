// The MoE ops on CUDA devices, by one of two paths chosen per group the same way on every rank:
// groups of GPUs of this host whose rows fit the staging area take the peer path
// (cuda/peer_moe.h: kernels, rows GPU to GPU); others are staged: every operand is copied into
// pinned host memory on XLA's stream, the CPU engine's MoE code (the very code of the CPU
// handlers) runs on the device's worker thread (cuda/staging.h), and the result is copied back,
// so semantics, validation, determinism and the remote-first schedule across hosts are exactly
// the CPU path's. JACCL_CUDA_PATH applies as for the collectives (cuda/collective_paths.h).
//
// Contract: run_moe_on_gpu(request, ordinal, stream, host) takes a request of device buffers
// (moe/request.h; its device is filled in from `ordinal`), checks its shapes
// (check_moe_request) before anything is enqueued, and enqueues it on `stream`; on the staged
// path `host` runs the CPU engine on a request of host copies. Failures behave as on the
// collective paths.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/status.h"
#include "moe/request.h"

namespace jaccl::cuda {

// Runs a request of host buffers on the CPU engine: 0, or non-zero with a message in `error`.
using HostMoeEngine = int (*)(const MoeRequest& request, char* error, size_t error_len);

Status run_moe_on_gpu(MoeRequest request, int ordinal, cudaStream_t stream, HostMoeEngine host);

}  // namespace jaccl::cuda
