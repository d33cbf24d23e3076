// Element-wise reduction of n arrays (n <= 16), every dtype and op.
//
// Schedule. The output splits into 16-byte vectors, dealt out over the grid's G threads: at
// each step thread g takes the vectors g, g + G, ..., g + (kUnroll - 1) G of the next
// kUnroll x G (each load instruction of a warp reads 512 consecutive bytes). The grid is one
// wave of resident blocks (launch_shape.cuh) when there are vectors enough, else a thread
// per vector, so that a small reduction still spreads over as many SMs as it can fill. A
// thread issues all its loads of a step, kUnroll vectors of each of the n operands, before it
// combines any (bytes in flight hide DRAM and NVLink latency), combines each vector's
// operands in the order given in the accumulator type (float32 for float16/bfloat16, float16
// rounded after every step, as the CPU engine does), and stores. The last, partial step is
// the same with each vector's loads and store guarded by its index. Loads and stores carry the streaming cache hint: every byte
// is touched once. The operand count is a template parameter from 1 to 8, so the loads unroll
// fully and the registers fit the count (kUnroll = 8 / n: eight 16-byte loads in flight per
// thread whatever n is); 9 to 16 operands take a runtime count, one vector per step. Steps
// advance by additions only.
//
// Pointers that all sit the same distance past a 16-byte boundary (slices of aligned buffers)
// reduce the elements before the first boundary (head) and after the last whole vector
// (tail) one per thread, in the same launch. Pointers at different distances go element by
// element on the same grid-stride schedule.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/reduce_apply.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/launch_shape.cuh"

namespace jaccl::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRuntimeCount = 0;  // operand count template argument: ops.n, read at run time

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

// One step of a fold over values stored as T: apply<kOp>, then float16's rounding after every
// step; of two NaNs a float16 sum keeps the earlier (common/reduce_apply.h).
template <ReduceOp kOp, typename T, typename A>
__device__ __forceinline__ A step(A acc, A x) {
  if constexpr (std::is_same_v<T, __half>) {
    if (float16_keeps_earlier<kOp>(acc, x)) return acc;
    return widen<A>(narrow<T>(apply<kOp>(acc, x)));
  } else {
    return apply<kOp>(acc, x);
  }
}

// The first operand as this fold takes it, and the fold's last step. A sum's seed (+0 first)
// moves to the end here: the kernels keep subnormals (no flush to zero), so a sum is -0 only
// when every operand is, and adding +0 last gives seed()'s bits while a step's first
// instruction that reads a load still needs two of them (ptxas then issues every load of the
// step first: tests/builds/test_kernel_machine_code.py).
template <ReduceOp kOp, typename A>
__device__ __forceinline__ A first(A x) {
  if constexpr (kOp == ReduceOp::kSum) return x;
  else return seed<kOp>(x);
}

template <ReduceOp kOp, typename A>
__device__ __forceinline__ A finish(A acc) {
  if constexpr (kOp == ReduceOp::kSum) return seed<kOp>(acc);
  else return acc;
}

// Where the vectors are: elements [head, head + vectors * (16 / sizeof(T))) move as 16-byte
// vectors; the head elements before them and the rest after them, one at a time.
struct Split {
  size_t count = 0;
  size_t head = 0;
  size_t vectors = 0;
  uint32_t zero = 0;  // always 0, unknown to the compiler: see hold_until_loaded()
};

// Makes the first operand's words depend on every operand's load, so that no operand can be
// combined before every load of the step has been issued: without it, ptxas schedules a step
// of one vector per operand as load, load, add, load, add, ... and reuses the registers, which
// leaves 2-4 of a thread's loads in flight instead of all of them (float32 and bfloat16, 5-8
// operands, sm_90 machine code). The words OR-ed into in[0] are the other operands' AND, AND
// zero: a kernel argument that is always 0 (bits unchanged) but that the compiler cannot see
// (so it cannot fold the gate away).
template <int kSlots>
__device__ __forceinline__ void hold_until_loaded(uint4 (&in)[kSlots], int n, uint32_t zero) {
  uint4 all = in[1];
#pragma unroll
  for (int k = 2; k < kSlots; ++k) {
    if (k < n) {
      all.x &= in[k].x;
      all.y &= in[k].y;
      all.z &= in[k].z;
      all.w &= in[k].w;
    }
  }
  in[0].x |= all.x & zero;
  in[0].y |= all.y & zero;
  in[0].z |= all.z & zero;
  in[0].w |= all.w & zero;
}

template <ReduceOp kOp, typename T>
__device__ __forceinline__ T reduce_element(const Operands& ops, int n, size_t i) {
  using A = typename Acc<T>::type;
  A acc = first<kOp>(widen<A>(static_cast<const T*>(ops.p[0])[i]));
  for (int k = 1; k < n; ++k) acc = step<kOp, T>(acc, widen<A>(static_cast<const T*>(ops.p[k])[i]));
  return narrow<T>(finish<kOp>(acc));
}

// in[k] holds operand k's copy of one vector; combined in operand order.
template <ReduceOp kOp, typename T, int kSlots>
__device__ __forceinline__ uint4 combine(const uint4 (&in)[kSlots], int n) {
  using A = typename Acc<T>::type;
  constexpr int kVec = 16 / sizeof(T);
  A acc[kVec];
  const T* in0 = reinterpret_cast<const T*>(&in[0]);
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = first<kOp>(widen<A>(in0[i]));
#pragma unroll
  for (int k = 1; k < kSlots; ++k) {
    if (k < n) {
      const T* x = reinterpret_cast<const T*>(&in[k]);
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] = step<kOp, T>(acc[i], widen<A>(x[i]));
    }
  }
  uint4 out;
  T* o = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int i = 0; i < kVec; ++i) o[i] = narrow<T>(finish<kOp>(acc[i]));
  return out;
}

template <ReduceOp kOp, typename T, int kCount, int kUnroll>
__global__ void __launch_bounds__(kThreads) reduce_vectors(T* dst, Operands ops, Split split) {
  constexpr int kSlots = kCount == kRuntimeCount ? kMaxOperands : kCount;
  constexpr size_t kVec = 16 / sizeof(T);
  const int n = kCount == kRuntimeCount ? ops.n : kCount;
  const uint4* src[kSlots];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    src[k] = k < n ? reinterpret_cast<const uint4*>(static_cast<const T*>(ops.p[k]) + split.head) : nullptr;
  }
  uint4* out = reinterpret_cast<uint4*>(dst + split.head);
  const size_t lanes = static_cast<size_t>(gridDim.x) * blockDim.x;  // G: threads in the grid
  const size_t step = lanes * kUnroll;
  size_t v = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; v + (kUnroll - 1) * lanes < split.vectors; v += step) {
    uint4 in[kUnroll][kSlots];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        if (k < n) in[u][k] = __ldcs(src[k] + v + u * lanes);
      }
    }
    if constexpr (kUnroll == 1 && kCount >= 5) hold_until_loaded(in[0], n, split.zero);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) __stcs(out + v + u * lanes, combine<kOp, T, kSlots>(in[u], n));
  }
  // The last, partial step: whichever of this thread's vectors are left, loads first.
  uint4 in[kUnroll][kSlots];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (v + u * lanes < split.vectors) {
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        if (k < n) in[u][k] = __ldcs(src[k] + v + u * lanes);
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (v + u * lanes < split.vectors) __stcs(out + v + u * lanes, combine<kOp, T, kSlots>(in[u], n));
  }
  // Head and tail elements (fewer than 2 vectors' worth), one per thread of the grid.
  const size_t edges = split.count - split.vectors * kVec;
  const size_t g = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (g < edges) {
    const size_t i = g < split.head ? g : g + split.vectors * kVec;
    dst[i] = reduce_element<kOp, T>(ops, n, i);
  }
}

template <ReduceOp kOp, typename T>
__global__ void __launch_bounds__(kThreads) reduce_elements(T* dst, Operands ops, size_t count) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += step) {
    dst[i] = reduce_element<kOp, T>(ops, ops.n, i);
  }
}

template <ReduceOp kOp, typename T, int kCount>
cudaError_t launch_vectors(T* dst, const Operands& ops, const Split& split, cudaStream_t stream) {
  constexpr int kUnroll = kCount == kRuntimeCount ? 1 : (kCount >= 8 ? 1 : 8 / kCount);
  constexpr auto kernel = reduce_vectors<kOp, T, kCount, kUnroll>;
  const int blocks = grid_for(split.vectors, kThreads, wave_blocks<kernel>(kThreads));
  kernel<<<blocks, kThreads, 0, stream>>>(dst, ops, split);
  return cudaGetLastError();
}

template <ReduceOp kOp, typename T>
cudaError_t launch_op(T* dst, const Operands& ops, size_t count, cudaStream_t stream) {
  constexpr size_t kVec = 16 / sizeof(T);
  const uintptr_t offset = reinterpret_cast<uintptr_t>(dst) % 16;
  bool shared_offset = offset % sizeof(T) == 0;
  for (int k = 0; k < ops.n; ++k) shared_offset &= reinterpret_cast<uintptr_t>(ops.p[k]) % 16 == offset;
  if (!shared_offset) {
    constexpr auto kernel = reduce_elements<kOp, T>;
    const int blocks = grid_for(count, kThreads, wave_blocks<kernel>(kThreads));
    kernel<<<blocks, kThreads, 0, stream>>>(dst, ops, count);
    return cudaGetLastError();
  }
  Split split;
  split.count = count;
  split.head = std::min<size_t>(count, (16 - offset) % 16 / sizeof(T));
  split.vectors = (count - split.head) / kVec;
  switch (ops.n) {
    case 1: return launch_vectors<kOp, T, 1>(dst, ops, split, stream);
    case 2: return launch_vectors<kOp, T, 2>(dst, ops, split, stream);
    case 3: return launch_vectors<kOp, T, 3>(dst, ops, split, stream);
    case 4: return launch_vectors<kOp, T, 4>(dst, ops, split, stream);
    case 5: return launch_vectors<kOp, T, 5>(dst, ops, split, stream);
    case 6: return launch_vectors<kOp, T, 6>(dst, ops, split, stream);
    case 7: return launch_vectors<kOp, T, 7>(dst, ops, split, stream);
    case 8: return launch_vectors<kOp, T, 8>(dst, ops, split, stream);
    default: return launch_vectors<kOp, T, kRuntimeCount>(dst, ops, split, stream);
  }
}

template <typename T>
cudaError_t launch_typed(ReduceOp op, T* dst, const Operands& ops, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (op) {
    case ReduceOp::kSum: return launch_op<ReduceOp::kSum>(dst, ops, count, stream);
    case ReduceOp::kProd: return launch_op<ReduceOp::kProd>(dst, ops, count, stream);
    case ReduceOp::kMax: return launch_op<ReduceOp::kMax>(dst, ops, count, stream);
    case ReduceOp::kMin: return launch_op<ReduceOp::kMin>(dst, ops, count, stream);
    default: return cudaErrorInvalidValue;
  }
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
