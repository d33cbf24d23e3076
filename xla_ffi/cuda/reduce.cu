// Element-wise reduction of up to kMaxOperands arrays. Each thread owns 16 bytes of the output
// at a time (a grid-stride loop): it loads the same 16 bytes of every operand (independent
// loads in flight), combines them in operand order in the accumulator type, and stores once.
// A scalar tail loop takes what is left when the count is not a multiple of the vector width
// or a pointer is not 16-byte aligned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace jaccl::cuda {
namespace {

struct Operands {
  const void* p[kMaxOperands];
  int n;
};

template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };

template <typename A, typename T>
__device__ __forceinline__ A widen(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return static_cast<A>(v);
}

template <typename T, typename A>
__device__ __forceinline__ T narrow(A v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return static_cast<T>(v);
}

template <ReduceOp kOp, typename A>
__device__ __forceinline__ A apply(A a, A b) {
  if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kProd) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(kOp == ReduceOp::kSum ? static_cast<U>(static_cast<U>(a) + static_cast<U>(b))
                                                  : static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return kOp == ReduceOp::kSum ? a + b : a * b;
    }
  } else if constexpr (kOp == ReduceOp::kMax) {
    if constexpr (std::is_floating_point_v<A>) return (a > b || a != a) ? a : b;
    else return a > b ? a : b;
  } else {
    if constexpr (std::is_floating_point_v<A>) return (a < b || a != a) ? a : b;
    else return a < b ? a : b;
  }
}

template <ReduceOp kOp, typename T>
__global__ void reduce_kernel(T* dst, Operands ops, size_t count, bool vectorised) {
  using A = typename Acc<T>::type;
  constexpr int kVec = 16 / sizeof(T);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t first_scalar = 0;
  if (vectorised) {
    const size_t vectors = count / kVec;
    for (size_t v = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; v < vectors; v += stride) {
      uint4 in[kMaxOperands];
#pragma unroll
      for (int k = 0; k < kMaxOperands; ++k) {
        if (k < ops.n) in[k] = reinterpret_cast<const uint4*>(ops.p[k])[v];
      }
      A acc[kVec];
      const T* first = reinterpret_cast<const T*>(&in[0]);
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] = widen<A>(first[i]);
      for (int k = 1; k < ops.n; ++k) {
        const T* x = reinterpret_cast<const T*>(&in[k]);
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[i] = apply<kOp>(acc[i], widen<A>(x[i]));
      }
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int i = 0; i < kVec; ++i) o[i] = narrow<T>(acc[i]);
      reinterpret_cast<uint4*>(dst)[v] = out;
    }
    first_scalar = vectors * kVec;
  }
  for (size_t i = first_scalar + blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    A acc = widen<A>(static_cast<const T*>(ops.p[0])[i]);
    for (int k = 1; k < ops.n; ++k) acc = apply<kOp>(acc, widen<A>(static_cast<const T*>(ops.p[k])[i]));
    dst[i] = narrow<T>(acc);
  }
}

template <typename T>
cudaError_t launch_typed(ReduceOp op, T* dst, const Operands& ops, size_t count, cudaStream_t stream) {
  bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  for (int k = 0; k < ops.n; ++k) aligned &= reinterpret_cast<uintptr_t>(ops.p[k]) % 16 == 0;
  const int threads = 256;
  const size_t work = aligned ? count / (16 / sizeof(T)) + 1 : count;
  const int blocks = static_cast<int>(std::min<size_t>((work + threads - 1) / threads, 132 * 8));
  if (count == 0) return cudaSuccess;
  switch (op) {
    case ReduceOp::kSum: reduce_kernel<ReduceOp::kSum, T><<<blocks, threads, 0, stream>>>(dst, ops, count, aligned); break;
    case ReduceOp::kProd: reduce_kernel<ReduceOp::kProd, T><<<blocks, threads, 0, stream>>>(dst, ops, count, aligned); break;
    case ReduceOp::kMax: reduce_kernel<ReduceOp::kMax, T><<<blocks, threads, 0, stream>>>(dst, ops, count, aligned); break;
    case ReduceOp::kMin: reduce_kernel<ReduceOp::kMin, T><<<blocks, threads, 0, stream>>>(dst, ops, count, aligned); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_reduce(ReduceOp op, Dtype dtype, void* dst, const void* const* srcs, int n,
                          size_t count, cudaStream_t stream) {
  if (n < 1 || n > kMaxOperands) return cudaErrorInvalidValue;
  Operands ops{};
  ops.n = n;
  for (int k = 0; k < n; ++k) ops.p[k] = srcs[k];
  switch (dtype) {
    case Dtype::kBool:
    case Dtype::kU8: return launch_typed(op, static_cast<uint8_t*>(dst), ops, count, stream);
    case Dtype::kI8: return launch_typed(op, static_cast<int8_t*>(dst), ops, count, stream);
    case Dtype::kI16: return launch_typed(op, static_cast<int16_t*>(dst), ops, count, stream);
    case Dtype::kU16: return launch_typed(op, static_cast<uint16_t*>(dst), ops, count, stream);
    case Dtype::kI32: return launch_typed(op, static_cast<int32_t*>(dst), ops, count, stream);
    case Dtype::kU32: return launch_typed(op, static_cast<uint32_t*>(dst), ops, count, stream);
    case Dtype::kI64: return launch_typed(op, static_cast<int64_t*>(dst), ops, count, stream);
    case Dtype::kU64: return launch_typed(op, static_cast<uint64_t*>(dst), ops, count, stream);
    case Dtype::kF16: return launch_typed(op, static_cast<__half*>(dst), ops, count, stream);
    case Dtype::kBF16: return launch_typed(op, static_cast<__nv_bfloat16*>(dst), ops, count, stream);
    case Dtype::kF32: return launch_typed(op, static_cast<float*>(dst), ops, count, stream);
    case Dtype::kF64: return launch_typed(op, static_cast<double*>(dst), ops, count, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace jaccl::cuda
