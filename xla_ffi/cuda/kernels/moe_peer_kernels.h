// Kernels of the MoE peer path: rows move between GPUs of one host through the staging areas
// of the peer workspaces, every list read on the device (no host round trip).
//
// Layout of a staging area during an MoE call: the sender's offsets (int32, group size + 1
// entries: rows for rank q are rows [offsets[q], offsets[q+1])) at byte 0, its packed rows
// (in send-list order, so grouped by destination rank) from byte kMoeRowsOffset.
//
// Contract: launchers enqueue on `stream` and return the launch error. Lists are int32 device
// arrays as the routing computed them; an entry out of range is skipped (never read or
// written out of bounds). check_experts records the first expert id outside [-1, num_experts)
// (value and index) in `status` and raises this device's own abort word, so the call's start
// barrier fails: it tells the peers and traps.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "cuda/kernels/peer_kernels.h"

namespace jaccl::cuda {

constexpr size_t kMoeRowsOffset = 256;

// What every peer-reading kernel needs to find rank q's rows for this rank.
struct PeerRows {
  int n = 0;                                // group size
  int me = 0;                               // this rank
  size_t sent_capacity = 0;                 // rows a sender's list holds (the same on every rank)
  const char* staging[kMaxPeers] = {};      // rank q's staging area (offsets, then rows)
};

cudaError_t launch_check_experts(const int32_t* topk_idx, size_t count, int64_t num_experts,
                                 DeviceStatus* status, int64_t* my_abort, int64_t self,
                                 cudaStream_t stream);

// staging rows[j] = src[rows[j]] for j < offsets[n] (offsets read on the device).
cudaError_t launch_pack_rows(char* staging_rows, const char* src, size_t src_rows,
                             const int32_t* rows, const int32_t* offsets, int n, size_t capacity,
                             size_t row_bytes, cudaStream_t stream);

// For every received row g < min(recv_offsets[n], capacity) (from rank q = the one whose range
// holds g, the i-th of its rows for this rank): dst[recv_rows[g]] = row i of rank q's rows for
// this rank. `capacity` is the length of this rank's receive lists.
cudaError_t launch_scatter_from_peers(char* dst, size_t dst_rows, const int32_t* recv_rows,
                                      const int32_t* recv_offsets, size_t capacity,
                                      const PeerRows& peers, size_t row_bytes, cudaStream_t stream);

// table[recv_pairs[g]] = address of that row in rank q's staging area (as above); pairs
// outside [0, pairs) are skipped. The table must be zeroed first (missing pairs stay null).
cudaError_t launch_pair_table(const void** table, size_t pairs, const int32_t* recv_pairs,
                              const int32_t* recv_offsets, size_t capacity,
                              const PeerRows& peers, size_t row_bytes, cudaStream_t stream);

// out[t * topk + k] = sum over i ascending of dout[t, i] * row(t, k)[i] in float32, two
// roundings per step as on the CPU (0 for pairs without a row). dtype float32/bfloat16/float16.
cudaError_t launch_pair_dot(Dtype dtype, float* out, const void* const* rows, const void* dout,
                            size_t tokens, size_t topk, size_t hidden, cudaStream_t stream);

}  // namespace jaccl::cuda
