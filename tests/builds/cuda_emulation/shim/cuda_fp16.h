// Host stand-in for cuda_fp16.h (tests only): __half as 16 stored bits, conversions exact to
// float and round-to-nearest-even from float, as the device intrinsics are.
#pragma once

#include "common/half.h"

struct __half {
  uint16_t bits;
};

inline float __half2float(__half h) { return jaccl::to_float(jaccl::f16_t{h.bits}); }
inline __half __float2half_rn(float f) { return __half{jaccl::to_f16(f).bits}; }
