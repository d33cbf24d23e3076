// Values of the checks: bitwise comparison of arrays, where two NaNs of a float dtype count as
// equal (GPU conversions do not keep NaN payloads, so only NaN-ness is part of the contract),
// and float32 views of float32/bfloat16/float16 elements (the MoE row dtypes).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>

#include "common/dtype.h"
#include "common/half.h"

namespace jaccl::emulated {

inline bool is_nan(Dtype dtype, const char* p) {
  switch (dtype) {
    case Dtype::kF32: { float f; std::memcpy(&f, p, 4); return std::isnan(f); }
    case Dtype::kF64: { double d; std::memcpy(&d, p, 8); return std::isnan(d); }
    case Dtype::kF16: { uint16_t b; std::memcpy(&b, p, 2); return std::isnan(to_float(f16_t{b})); }
    case Dtype::kBF16: { uint16_t b; std::memcpy(&b, p, 2); return std::isnan(to_float(bf16_t{b})); }
    default: return false;
  }
}

inline bool same_values(Dtype dtype, const void* got, const void* want, size_t count) {
  const size_t size = dtype_size(dtype);
  const char* a = static_cast<const char*>(got);
  const char* b = static_cast<const char*>(want);
  for (size_t i = 0; i < count; ++i, a += size, b += size) {
    if (std::memcmp(a, b, size) != 0 && !(is_nan(dtype, a) && is_nan(dtype, b))) return false;
  }
  return true;
}

inline float as_float(Dtype dtype, const char* p) {
  if (dtype == Dtype::kF32) { float f; std::memcpy(&f, p, 4); return f; }
  uint16_t b;
  std::memcpy(&b, p, 2);
  return dtype == Dtype::kBF16 ? to_float(bf16_t{b}) : to_float(f16_t{b});
}

inline void store_float(Dtype dtype, char* p, float f) {
  if (dtype == Dtype::kF32) { std::memcpy(p, &f, 4); return; }
  const uint16_t b = dtype == Dtype::kBF16 ? to_bf16(f).bits : to_f16(f).bits;
  std::memcpy(p, &b, 2);
}

}  // namespace jaccl::emulated
