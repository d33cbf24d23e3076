// Grid sizes for grid-stride kernels: one whole wave of resident blocks.
//
// A grid-stride kernel launched with more blocks than the GPU holds at once runs a second,
// partial wave at the end, while most SMs idle (the H200's first reduction kernel: 1056 blocks
// where 792 fit, 1.33 waves, 48% of DRAM peak). Launched with exactly the blocks that fit
// (SMs x resident blocks per SM, from the occupancy API), every SM streams until the work
// runs out; with less work than a wave, only the blocks the work needs.
//
// Contract: wave_blocks<kernel>(threads) is the number of blocks of `threads` threads that the
// current device runs at once (at least 1); grid_for() caps it by the work. Both are cached
// (the SM count per device, the occupancy per kernel: a process's GPUs are taken to be of one
// architecture) and safe to call from several host threads.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>

namespace jaccl::cuda {

inline int multiprocessors() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    cudaGetLastError();
    return 1;
  }
  int count = cached[device].load(std::memory_order_relaxed);
  if (count == 0) {
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count < 1) {
      cudaGetLastError();
      count = 1;
    }
    cached[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

template <auto kKernel>
int wave_blocks(int threads) {
  static std::atomic<int> per_sm{0};
  int blocks = per_sm.load(std::memory_order_relaxed);
  if (blocks == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, threads, 0) != cudaSuccess || blocks < 1) {
      cudaGetLastError();
      blocks = 1;
    }
    per_sm.store(blocks, std::memory_order_relaxed);
  }
  return blocks * multiprocessors();
}

// Blocks for `units` of work, `per_block` units per block and step, at most one wave.
inline int grid_for(size_t units, size_t per_block, int wave) {
  const size_t needed = (units + per_block - 1) / per_block;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(needed, static_cast<size_t>(wave))));
}

}  // namespace jaccl::cuda
