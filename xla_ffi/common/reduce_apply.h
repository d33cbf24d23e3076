// Each reduction op on two accumulator values, written once for both compilers: the CPU engine
// (common/reduce.cc) and the CUDA kernels (cuda/kernels/reduce.cu) include this header, so the
// GPU and the CPU combine elements by the same rule, bit for bit.
//
// Contract: apply<op>(a, b) is common/reduce.h's op on a (the earlier operand) and b in type A:
// integer sums and products wrap around (no signed-overflow UB); a float sum of -0s is +0
// (XLA's reductions start from +0); max/min propagate NaN and of equal values keep a.
#pragma once

#include <type_traits>

#include "common/reduce.h"

#if defined(__CUDACC__)
#define JACCL_REDUCE_INLINE __host__ __device__ __forceinline__
#else
#define JACCL_REDUCE_INLINE inline
#endif

namespace jaccl {

template <ReduceOp kOp, typename A>
JACCL_REDUCE_INLINE A apply(A a, A b) {
  if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kProd) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(kOp == ReduceOp::kSum
                                ? static_cast<U>(static_cast<U>(a) + static_cast<U>(b))
                                : static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return kOp == ReduceOp::kSum ? (a + b) + A(0) : a * b;
    }
  } else if constexpr (kOp == ReduceOp::kMax) {
    if constexpr (std::is_floating_point_v<A>) return (a >= b || a != a) ? a : b;
    else return a > b ? a : b;
  } else {
    if constexpr (std::is_floating_point_v<A>) return (a <= b || a != a) ? a : b;
    else return a < b ? a : b;
  }
}

}  // namespace jaccl
