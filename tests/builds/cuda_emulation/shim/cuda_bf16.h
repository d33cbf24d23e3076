// Host stand-in for cuda_bf16.h (tests only): __nv_bfloat16 as 16 stored bits, conversions
// exact to float and round-to-nearest-even from float, as the device intrinsics are.
#pragma once

#include "common/half.h"

struct __nv_bfloat16 {
  uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 h) { return jaccl::to_float(jaccl::bf16_t{h.bits}); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{jaccl::to_bf16(f).bits}; }
