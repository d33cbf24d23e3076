// Each reduction op on two accumulator values, written once for both compilers: the CPU engine
// (common/reduce.cc) and the CUDA kernels (cuda/kernels/reduce.cu) include this header, so the
// GPU and the CPU combine elements by the same rule, bit for bit.
//
// Contract: seed<op>(x) is the first operand of a fold as it enters it, apply<op>(a, b) one step
// of the fold with a the value so far and b the next operand, both in type A: the bits of
// XLA:CPU's collectives, whose folds start from the op's identity (seed() is that first step).
// Integer sums and products wrap around (no signed-overflow UB). A float sum starts from +0, so
// a sum of -0s, one alone included, is +0 (the CUDA kernels, which keep subnormals, add that
// +0 last instead: the same bits there; cuda/kernels/reduce.cu). Max and min start from -inf / +inf and take an
// operand only when it is greater / less: a NaN is never taken (NaNs alone give -inf / +inf),
// and of equal values (-0, +0) the earlier stays.
//
// Of two NaNs a float sum keeps the later operand's (b), quieted, as XLA:CPU's float32,
// float64 and bfloat16 (float32-accumulated) folds do: a NaN made on the way (inf - inf, the
// machine's negative default NaN) meeting one of the operands (numpy's positive NaN) gives
// the operand's. A compiler may put either operand first in the add instruction, whose NaN
// it keeps, so the choice is made explicitly. XLA:CPU's float16 folds keep the earlier one's
// (step() in common/reduce.cc and cuda/kernels/reduce.cu).
//
// A fold over values stored as float16 rounds its float32 accumulator to float16 after every
// step, as XLA:CPU adds float16 values one pair at a time (float32 holds each exact sum closely
// enough that rounding it again gives float16's own sum: 24 >= 2 * 11 + 2 bits); bfloat16 keeps
// float32 to the last step and rounds once, as XLA:CPU does. Each compiler's fold writes that
// step next to its own conversions (step() in common/reduce.cc and cuda/kernels/reduce.cu).
#pragma once

#include <cmath>
#include <type_traits>

#include "common/reduce.h"

#if defined(__CUDACC__)
#define JACCL_REDUCE_INLINE __host__ __device__ __forceinline__
#else
#define JACCL_REDUCE_INLINE inline
#endif

namespace jaccl {

// Whether seed<op> changes anything for A: sums, max and min of floating-point values.
template <ReduceOp kOp, typename A>
inline constexpr bool kSeeds = std::is_floating_point_v<A> && kOp != ReduceOp::kProd;

template <ReduceOp kOp, typename A>
JACCL_REDUCE_INLINE A seed(A x) {
  if constexpr (kSeeds<kOp, A> && kOp == ReduceOp::kSum) {
    return x + A(0);
  } else if constexpr (kSeeds<kOp, A>) {
    if (x != x) return static_cast<A>(kOp == ReduceOp::kMax ? -INFINITY : INFINITY);
  }
  return x;
}

template <ReduceOp kOp, typename A>
JACCL_REDUCE_INLINE A apply(A a, A b) {
  if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kProd) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(kOp == ReduceOp::kSum
                                ? static_cast<U>(static_cast<U>(a) + static_cast<U>(b))
                                : static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else if constexpr (kOp == ReduceOp::kSum) {
      // Written so that it vectorises: the sum is computed whatever the operands, and the
      // choice is a select (a short-circuit `&&` left the loop scalar: 2x slower).
      const A sum = a + b;  // a seeded: -0 only where a flushed sum made it, as in XLA's fold
#if defined(__CUDA_ARCH__)
      return a != a ? (b != b ? b : sum) : sum;  // the GPU kernels keep b as it is
#else
      // b + b: b quieted, as the CPU's add gives it (a signalling NaN kept as it was differed
      // from XLA's).
      return a != a ? (b != b ? b + b : sum) : sum;
#endif
    } else {
      return a * b;
    }
  } else if constexpr (kOp == ReduceOp::kMax) {
    return b > a ? b : a;
  } else {
    return b < a ? b : a;
  }
}

// Whether one step of a float16 fold keeps its earlier operand `a` as it is: of two NaNs a
// float16 sum keeps the earlier, as XLA:CPU's does (each compiler's step(), before its
// rounding to float16).
template <ReduceOp kOp, typename A>
JACCL_REDUCE_INLINE bool float16_keeps_earlier(A a, A b) {
  return kOp == ReduceOp::kSum && a != a && b != b;
}

}  // namespace jaccl
