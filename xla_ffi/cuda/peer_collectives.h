// The peer path: one collective among GPUs of this host that read each other's workspaces,
// enqueued on XLA's stream with no host synchronisation.
//
// Contract: run_peer_collective() (for groups peer_path_group() accepts) enqueues the whole
// collective on `stream` and returns the first CUDA launch error (the device is then broken:
// mark_broken). Every rank of the group must enqueue the same collectives in the same order;
// a rank that does not is reported by the start barrier.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/kinds.h"
#include "collectives/request.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "cuda/peer_group.h"
#include "cuda/peers.h"

namespace jaccl::cuda {

// The all_reduce schedule the peer path uses for `bytes` (kNaive = one-shot, kMesh = two-shot).
Algorithm peer_all_reduce_algorithm(Algorithm requested, size_t bytes);
// The largest all_reduce that goes one-shot (JACCL_CUDA_ONESHOT_KB, through configure()).
void set_one_shot_limit_bytes(size_t bytes);

// `call`: a checked request (collectives/request.h) of device buffers, its site agreed by the
// ranks; `receive_from`: ppermute's rank whose input this rank gets (-1: zeros).
cudaError_t run_peer_collective(LocalDevice& me, const std::vector<int64_t>& members, int rank,
                                const CollectiveRequest& call, int receive_from,
                                cudaStream_t stream);

}  // namespace jaccl::cuda
