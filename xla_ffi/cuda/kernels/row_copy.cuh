// Moving one row with the threads of a block (the MoE gather, pack and scatter kernels).
//
// Schedule: when the row's length and both addresses are multiples of 16 bytes, thread t
// copies 16-byte vectors t, t + blockDim, ... (a warp's loads read 512 consecutive bytes),
// issuing kRowUnroll loads before the first store, so that several loads per thread are in
// flight (one at a time left most of the bandwidth unused); loads carry the streaming cache
// hint (a row is read once). Other rows go byte by byte.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace jaccl::cuda {

constexpr int kRowUnroll = 4;

__device__ __forceinline__ void copy_row(char* dst, const char* src, size_t bytes) {
  const bool vectors_fit = bytes % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(src) % 16 == 0;
  if (!vectors_fit) {
    for (size_t b = threadIdx.x; b < bytes; b += blockDim.x) dst[b] = src[b];
    return;
  }
  const uint4* from = reinterpret_cast<const uint4*>(src);
  uint4* to = reinterpret_cast<uint4*>(dst);
  const size_t vectors = bytes / 16, lanes = blockDim.x;
  size_t v = threadIdx.x;
  for (; v + (kRowUnroll - 1) * lanes < vectors; v += kRowUnroll * lanes) {
    uint4 r[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) r[u] = __ldcs(from + v + u * lanes);
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) to[v + u * lanes] = r[u];
  }
  // The rest of the row, fewer than kRowUnroll vectors per thread: loads first here too (one
  // load-store pair at a time would wait for memory once per vector: the compiler must keep a
  // store ahead of the next load, which might read what it wrote).
  uint4 r[kRowUnroll];
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    if (v + u * lanes < vectors) r[u] = __ldcs(from + v + u * lanes);
  }
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    if (v + u * lanes < vectors) to[v + u * lanes] = r[u];
  }
}

}  // namespace jaccl::cuda
