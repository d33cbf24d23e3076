#include "common/dtype.h"

namespace jaccl {

size_t dtype_size(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBool: case Dtype::kI8: case Dtype::kU8: return 1;
    case Dtype::kI16: case Dtype::kU16: case Dtype::kF16: case Dtype::kBF16: return 2;
    case Dtype::kI32: case Dtype::kU32: case Dtype::kF32: return 4;
    case Dtype::kI64: case Dtype::kU64: case Dtype::kF64: return 8;
    default: return 0;
  }
}

const char* dtype_name(Dtype dtype) {
  static const char* const kNames[] = {"bool",   "int8",   "int16",   "int32",   "int64",
                                       "uint8",  "uint16", "uint32",  "uint64",  "float16",
                                       "bfloat16", "float32", "float64"};
  auto i = static_cast<size_t>(dtype);
  return i < static_cast<size_t>(Dtype::kCount) ? kNames[i] : "unknown";
}

Dtype accumulator_dtype(Dtype dtype) {
  return (dtype == Dtype::kF16 || dtype == Dtype::kBF16) ? Dtype::kF32 : dtype;
}

bool is_float(Dtype dtype) {
  return dtype == Dtype::kF16 || dtype == Dtype::kBF16 || dtype == Dtype::kF32 ||
         dtype == Dtype::kF64;
}

}  // namespace jaccl
