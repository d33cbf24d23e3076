// Element-wise reductions and conversions over contiguous arrays.
//
// Contract: combine() computes dst[i] = op(...op(op(srcs[0][i], srcs[1][i]), srcs[2][i])...)
// in exactly that order (srcs[0] seeded, unless it is a fold's running value), in the
// accumulator type of `elem` (float32 for float16/bfloat16; float16's rounded to float16
// after every step), and stores the result as dst_dtype: XLA:CPU's collectives' bits (common/reduce_apply.h). Every
// operand's dtype is `elem` or accumulator_dtype(elem). dst may alias any operand
// element for element (same position); other overlaps are not allowed. Integer sums
// and products wrap around; a float sum of -0s is +0 (one operand alone too); max/min
// never take a NaN operand (NaNs alone give -inf / +inf), and of equal values (-0, +0)
// keep the earlier operand's; bool max/min are or/and.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace jaccl {

enum class ReduceOp : uint8_t { kSum = 0, kProd, kMax, kMin, kCount };

const char* reduce_op_name(ReduceOp op);

struct Operand {
  const void* data;
  Dtype dtype;
  // srcs[0] only: the running value of a fold begun elsewhere (in the accumulator type where it
  // differs), which goes on as it is instead of entering as a first operand (a flushed -0
  // stays -0; reduce_apply.h's seed()).
  bool running = false;
};

void combine(ReduceOp op, Dtype elem, void* dst, Dtype dst_dtype, const Operand* srcs,
             int num_srcs, size_t n);

// dst = src converted; both dtypes are `elem` or its accumulator type.
void convert(Dtype elem, void* dst, Dtype dst_dtype, const void* src, Dtype src_dtype,
             size_t n);

}  // namespace jaccl
