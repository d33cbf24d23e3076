// Bitwise comparison of arrays, where two NaNs of a float dtype count as equal (GPU
// conversions do not keep NaN payloads, so only NaN-ness is part of the contract).
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

}  // namespace jaccl::emulated
