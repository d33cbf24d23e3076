// MoE kernels.
//
// Combine: one block per token. The block first copies the token's K row addresses and
// weights into shared memory (the first kSharedPairs of them; more are read from global
// memory). Each thread then owns 16-byte columns of the hidden dimension and, for each,
// issues the loads of a batch of kRowsInFlight rows (streaming: every row is read once)
// before it accumulates them, w * row in float32 in ascending k with two roundings per step
// (never an FMA), so the result has the CPU path's order and rounding. A hidden size that is
// not a whole number of vectors goes element by element in the same order.
// Gather: one block per row, moved as row_copy.cuh describes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels/float_convert.cuh"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/row_copy.cuh"

namespace jaccl::cuda {
namespace {

constexpr int kCombineThreads = 128;
constexpr int kSharedPairs = 64;
constexpr int kRowsInFlight = 8;

// acc + w * x with two roundings, never fused into an FMA: the CPU path's arithmetic.
__device__ __forceinline__ float weighted(float acc, float w, float x, bool started) {
  const float product = __fmul_rn(w, x);
  return started ? __fadd_rn(acc, product) : product;
}

struct PairList {
  const void* const* rows;    // tokens * topk row addresses (null: no row)
  const float* weights;
  const void* const* shared_rows;
  const float* shared_weights;
  size_t first;               // this token's first pair
  size_t topk;

  __device__ const void* row(size_t k) const { return k < kSharedPairs ? shared_rows[k] : rows[first + k]; }
  __device__ float weight(size_t k) const { return k < kSharedPairs ? shared_weights[k] : weights[first + k]; }
};

template <typename T>
__device__ void combine_vectors(uint4* out, const PairList& pairs, size_t columns) {
  constexpr int kVec = 16 / sizeof(T);
  for (size_t c = threadIdx.x; c < columns; c += blockDim.x) {
    float acc[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;
    bool started = false;
    for (size_t k0 = 0; k0 < pairs.topk; k0 += kRowsInFlight) {
      uint4 v[kRowsInFlight];
      bool present[kRowsInFlight];
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j) {
        const void* row = k0 + j < pairs.topk ? pairs.row(k0 + j) : nullptr;
        present[j] = row != nullptr;
        if (present[j]) v[j] = __ldcs(static_cast<const uint4*>(row) + c);
      }
#pragma unroll
      for (int j = 0; j < kRowsInFlight; ++j) {
        if (!present[j]) continue;
        const float w = pairs.weight(k0 + j);
        const T* x = reinterpret_cast<const T*>(&v[j]);
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[i] = weighted(acc[i], w, to_f32(x[i]), started);
        started = true;
      }
    }
    uint4 result;
    T* o = reinterpret_cast<T*>(&result);
#pragma unroll
    for (int i = 0; i < kVec; ++i) o[i] = from_f32<T>(acc[i]);
    __stcs(out + c, result);
  }
}

template <typename T>
__device__ void combine_elements(T* out, const PairList& pairs, size_t hidden) {
  for (size_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float acc = 0.0f;
    bool started = false;
    for (size_t k = 0; k < pairs.topk; ++k) {
      const T* row = static_cast<const T*>(pairs.row(k));
      if (row == nullptr) continue;
      acc = weighted(acc, pairs.weight(k), to_f32(row[c]), started);
      started = true;
    }
    out[c] = from_f32<T>(acc);
  }
}

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(T* out, const void* const* rows,
                                                                  const float* weights, size_t topk,
                                                                  size_t hidden) {
  __shared__ const void* shared_rows[kSharedPairs];
  __shared__ float shared_weights[kSharedPairs];
  const size_t t = blockIdx.x;
  for (size_t k = threadIdx.x; k < topk && k < kSharedPairs; k += blockDim.x) {
    shared_rows[k] = rows[t * topk + k];
    shared_weights[k] = weights[t * topk + k];
  }
  __syncthreads();
  const PairList pairs{rows, weights, shared_rows, shared_weights, t * topk, topk};
  constexpr size_t kVec = 16 / sizeof(T);
  if (hidden % kVec == 0) {
    combine_vectors<T>(reinterpret_cast<uint4*>(out + t * hidden), pairs, hidden / kVec);
  } else {
    combine_elements<T>(out + t * hidden, pairs, hidden);
  }
}

__global__ void gather_kernel(char* dst, const char* src, const int32_t* rows, size_t row_bytes) {
  const size_t i = blockIdx.x;
  copy_row(dst + i * row_bytes, src + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
}

}  // namespace

cudaError_t launch_moe_combine(Dtype dtype, void* out, const void* const* rows, const float* weights,
                               size_t tokens, size_t topk, size_t hidden, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  const int threads = kCombineThreads;
  switch (dtype) {
    case Dtype::kF32:
      combine_kernel<float><<<tokens, threads, 0, stream>>>(static_cast<float*>(out), rows, weights, topk, hidden);
      break;
    case Dtype::kBF16:
      combine_kernel<__nv_bfloat16><<<tokens, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), rows, weights, topk, hidden);
      break;
    case Dtype::kF16:
      combine_kernel<__half><<<tokens, threads, 0, stream>>>(static_cast<__half*>(out), rows, weights, topk, hidden);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(void* dst, const void* src, const int32_t* rows, size_t n,
                               size_t row_bytes, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  gather_kernel<<<n, 128, 0, stream>>>(static_cast<char*>(dst), static_cast<const char*>(src), rows, row_bytes);
  return cudaGetLastError();
}

}  // namespace jaccl::cuda
