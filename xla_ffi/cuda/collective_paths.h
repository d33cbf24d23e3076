// The collectives on CUDA devices, by one of two paths chosen per group the same way on every
// rank:
// - the peer path (cuda/peer_collectives.h): every member is a GPU of this host whose workspace
//   this process mapped (CUDA IPC or peer access); kernels and copies on XLA's stream, barriers
//   by flags in device memory, no host involvement;
// - the staged path: device buffers are copied into pinned host memory on XLA's stream, a host
//   job on the same stream (cuda/staging.h) runs the CPU engine on them, and the result is
//   copied back. Peers anywhere (this host or others) are reached by the CPU transports.
//   ragged_all_to_all always takes it (no peer path yet).
// JACCL_CUDA_PATH=auto (default) | peer | staged overrides the choice (same on every process).
//
// Contract: run_on_gpu(request, ordinal, stream, host) takes a request of device buffers
// (collectives/request.h; its device is filled in from `ordinal`), checks it as the CPU engine
// does (check_request) before anything is enqueued, and enqueues it on `stream`; on the staged
// path `host` runs the CPU engine on a request of host copies (the caller's bridge to the
// engine _jaccl owns). A ragged_all_to_all's `out` must hold the output operand's rows. A failure
// found before enqueueing is returned; one on the stream cannot fail the XLA call that enqueued
// it: the peer path's barrier traps (the context stops, so nothing consumes a wrong result) and
// leaves the reason in the device status; the staged path posts it on the abort board (peers
// stop). Either is returned by this device's next call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/request.h"
#include "common/status.h"
#include "cuda/peers.h"

namespace jaccl::cuda {

// Runs a request of host buffers on the CPU engine: 0, or non-zero with a message in `error`.
using HostEngine = int (*)(const CollectiveRequest& request, char* error, size_t error_len);

Status run_on_gpu(CollectiveRequest request, int ordinal, cudaStream_t stream, HostEngine host);

// What every op on a GPU (collectives, MoE: cuda/moe_paths.h) finds first: the device's global
// id, its LocalDevice (null without a peer path), its group in the table and its rank there.
// A failure the device already carries (an earlier host job's, its peer path's) is returned
// instead, as is a device in none of the groups.
struct CallGroup {
  int64_t device = 0;
  LocalDevice* local = nullptr;
  std::vector<int64_t> members;
  int rank = 0;
};
Status find_call_group(int ordinal, const int64_t* groups, size_t groups_len, int64_t group_size,
                       CallGroup* group);

}  // namespace jaccl::cuda
