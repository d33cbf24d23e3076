// MoE kernels. Combine: one block per token; each thread owns 16-byte columns of the hidden
// dimension and walks k in ascending order, accumulating w * row in float32 in registers, so
// the result has the CPU path's order and rounding. Gather: one block per row, 16-byte copies.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/float_convert.cuh"
#include "cuda/kernels.h"

namespace jaccl::cuda {
namespace {

// acc + w * x with two roundings, never fused into an FMA: the CPU path's arithmetic.
__device__ __forceinline__ float weighted(float acc, float w, float x, bool started) {
  const float product = __fmul_rn(w, x);
  return started ? __fadd_rn(acc, product) : product;
}

template <typename T>
__global__ void combine_kernel(T* out, const void* const* rows, const float* weights, size_t topk,
                               size_t hidden) {
  constexpr int kVec = 16 / sizeof(T);
  const size_t t = blockIdx.x;
  const bool vectorised = hidden % kVec == 0;
  const size_t columns = vectorised ? hidden / kVec : hidden;
  for (size_t c = threadIdx.x; c < columns; c += blockDim.x) {
    float acc[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;
    bool started = false;
    for (size_t k = 0; k < topk; ++k) {
      const T* row = static_cast<const T*>(rows[t * topk + k]);
      if (row == nullptr) continue;
      const float w = weights[t * topk + k];
      if (vectorised) {
        uint4 v = reinterpret_cast<const uint4*>(row)[c];
        const T* x = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[i] = weighted(acc[i], w, to_f32(x[i]), started);
      } else {
        acc[0] = weighted(acc[0], w, to_f32(row[c]), started);
      }
      started = true;
    }
    if (vectorised) {
      uint4 v;
      T* o = reinterpret_cast<T*>(&v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) o[i] = from_f32<T>(acc[i]);
      reinterpret_cast<uint4*>(out + t * hidden)[c] = v;
    } else {
      out[t * hidden + c] = from_f32<T>(acc[0]);
    }
  }
}

__global__ void gather_kernel(char* dst, const char* src, const int32_t* rows, size_t row_bytes) {
  const size_t i = blockIdx.x;
  const char* from = src + static_cast<size_t>(rows[i]) * row_bytes;
  char* to = dst + i * row_bytes;
  if (row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(from) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(to) % 16 == 0) {
    for (size_t b = threadIdx.x; b < row_bytes / 16; b += blockDim.x) {
      reinterpret_cast<uint4*>(to)[b] = reinterpret_cast<const uint4*>(from)[b];
    }
  } else {
    for (size_t b = threadIdx.x; b < row_bytes; b += blockDim.x) to[b] = from[b];
  }
}

}  // namespace

cudaError_t launch_moe_combine(Dtype dtype, void* out, const void* const* rows, const float* weights,
                               size_t tokens, size_t topk, size_t hidden, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  const int threads = 128;
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
