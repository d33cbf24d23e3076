// MoE peer-path kernels. Row movers give one block to a row at a time (grid-stride over
// rows), the block's threads moving it as row_copy.cuh describes. A received row
// finds its sender by scanning the receive offsets (group size <= 16), and its place in the
// sender's staging area from the offsets the sender published there.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/kernels/float_convert.cuh"
#include "cuda/kernels/moe_peer_kernels.h"
#include "cuda/kernels/row_copy.cuh"

namespace jaccl::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxBlocks = 65535;

__device__ int bad_expert_claimed = 0;  // per device: the first bad id reports

// Where received row g comes from: its sender's row, or null when a list entry is off.
__device__ const char* received_row(const PeerRows& peers, const int32_t* recv_offsets, size_t g,
                                    size_t row_bytes) {
  int q = 0;
  while (q + 1 < peers.n && static_cast<size_t>(recv_offsets[q + 1]) <= g) ++q;
  const int32_t* sender_offsets = reinterpret_cast<const int32_t*>(peers.staging[q]);
  const int32_t begin = sender_offsets[peers.me], end = sender_offsets[peers.me + 1];
  const size_t row = static_cast<size_t>(begin) + (g - recv_offsets[q]);
  // Only rows the sender listed for this rank (lists that disagree are skipped, not read).
  if (begin < 0 || row >= static_cast<size_t>(end) || static_cast<size_t>(end) > peers.sent_capacity) {
    return nullptr;
  }
  return peers.staging[q] + kMoeRowsOffset + row * row_bytes;
}

__global__ void check_experts_kernel(const int32_t* ids, size_t count, int64_t num_experts,
                                     DeviceStatus* status, int64_t* my_abort, int64_t self) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    const int32_t id = ids[i];
    if ((id < -1 || id >= num_experts) && atomicCAS(&bad_expert_claimed, 0, 1) == 0) {
      status->rank = static_cast<int32_t>(i);
      status->device = id;
      status->mine[0] = static_cast<uint64_t>(num_experts);
      __threadfence_system();
      status->error = kPeerBadExpert;
      *reinterpret_cast<volatile int64_t*>(my_abort) = self + 1;
      __threadfence_system();
    }
  }
}

__global__ void pack_kernel(char* staging_rows, const char* src, size_t src_rows,
                            const int32_t* rows, const int32_t* offsets, int n, size_t capacity,
                            size_t row_bytes) {
  const size_t total = min(static_cast<size_t>(max(offsets[n], 0)), capacity);
  for (size_t j = blockIdx.x; j < total; j += gridDim.x) {
    const int32_t r = rows[j];
    if (r < 0 || static_cast<size_t>(r) >= src_rows) continue;
    copy_row(staging_rows + j * row_bytes, src + static_cast<size_t>(r) * row_bytes, row_bytes);
  }
}

__global__ void scatter_kernel(char* dst, size_t dst_rows, const int32_t* recv_rows,
                               const int32_t* recv_offsets, size_t capacity, PeerRows peers,
                               size_t row_bytes) {
  const size_t total = min(static_cast<size_t>(max(recv_offsets[peers.n], 0)), capacity);
  for (size_t g = blockIdx.x; g < total; g += gridDim.x) {
    const int32_t d = recv_rows[g];
    const char* from = received_row(peers, recv_offsets, g, row_bytes);
    if (from == nullptr || d < 0 || static_cast<size_t>(d) >= dst_rows) continue;
    copy_row(dst + static_cast<size_t>(d) * row_bytes, from, row_bytes);
  }
}

__global__ void table_kernel(const void** table, size_t pairs, const int32_t* recv_pairs,
                             const int32_t* recv_offsets, size_t capacity, PeerRows peers,
                             size_t row_bytes) {
  const size_t total = min(static_cast<size_t>(max(recv_offsets[peers.n], 0)), capacity);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t g = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; g < total; g += stride) {
    const int32_t p = recv_pairs[g];
    const char* from = received_row(peers, recv_offsets, g, row_bytes);
    if (from == nullptr || p < 0 || static_cast<size_t>(p) >= pairs) continue;
    table[p] = from;
  }
}

template <typename T>
__global__ void pair_dot_kernel(float* out, const void* const* rows, const T* dout, size_t tokens,
                                size_t topk, size_t hidden) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; p < tokens * topk;
       p += stride) {
    const T* row = static_cast<const T*>(rows[p]);
    const T* d = dout + (p / topk) * hidden;
    float dot = 0.0f;
    if (row != nullptr) {
      for (size_t i = 0; i < hidden; ++i) dot = __fadd_rn(dot, __fmul_rn(to_f32(d[i]), to_f32(row[i])));
    }
    out[p] = dot;
  }
}

int blocks_for(size_t work, int per_block = 1) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>((work + per_block - 1) / per_block, kMaxBlocks)));
}

}  // namespace

cudaError_t launch_check_experts(const int32_t* topk_idx, size_t count, int64_t num_experts,
                                 DeviceStatus* status, int64_t* my_abort, int64_t self,
                                 cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  check_experts_kernel<<<blocks_for(count, kThreads), kThreads, 0, stream>>>(
      topk_idx, count, num_experts, status, my_abort, self);
  return cudaGetLastError();
}

cudaError_t launch_pack_rows(char* staging_rows, const char* src, size_t src_rows,
                             const int32_t* rows, const int32_t* offsets, int n, size_t capacity,
                             size_t row_bytes, cudaStream_t stream) {
  if (capacity == 0 || row_bytes == 0) return cudaSuccess;
  pack_kernel<<<blocks_for(capacity), kThreads, 0, stream>>>(staging_rows, src, src_rows, rows,
                                                             offsets, n, capacity, row_bytes);
  return cudaGetLastError();
}

cudaError_t launch_scatter_from_peers(char* dst, size_t dst_rows, const int32_t* recv_rows,
                                      const int32_t* recv_offsets, size_t capacity,
                                      const PeerRows& peers, size_t row_bytes, cudaStream_t stream) {
  if (capacity == 0 || row_bytes == 0) return cudaSuccess;
  scatter_kernel<<<blocks_for(capacity), kThreads, 0, stream>>>(dst, dst_rows, recv_rows,
                                                                recv_offsets, capacity, peers,
                                                                row_bytes);
  return cudaGetLastError();
}

cudaError_t launch_pair_table(const void** table, size_t pairs, const int32_t* recv_pairs,
                              const int32_t* recv_offsets, size_t capacity,
                              const PeerRows& peers, size_t row_bytes, cudaStream_t stream) {
  if (capacity == 0) return cudaSuccess;
  table_kernel<<<blocks_for(capacity, kThreads), kThreads, 0, stream>>>(
      table, pairs, recv_pairs, recv_offsets, capacity, peers, row_bytes);
  return cudaGetLastError();
}

cudaError_t launch_pair_dot(Dtype dtype, float* out, const void* const* rows, const void* dout,
                            size_t tokens, size_t topk, size_t hidden, cudaStream_t stream) {
  const size_t pairs = tokens * topk;
  if (pairs == 0) return cudaSuccess;
  const int blocks = blocks_for(pairs, kThreads);
  switch (dtype) {
    case Dtype::kF32:
      pair_dot_kernel<float><<<blocks, kThreads, 0, stream>>>(out, rows, static_cast<const float*>(dout), tokens, topk, hidden);
      break;
    case Dtype::kBF16:
      pair_dot_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(out, rows, static_cast<const __nv_bfloat16*>(dout), tokens, topk, hidden);
      break;
    case Dtype::kF16:
      pair_dot_kernel<__half><<<blocks, kThreads, 0, stream>>>(out, rows, static_cast<const __half*>(dout), tokens, topk, hidden);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace jaccl::cuda
