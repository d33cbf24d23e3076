// Element types the engine moves and reduces, independent of XLA.
//
// Contract: Dtype values are stable (they travel in frame headers between
// processes); dtype_size() and dtype_name() are defined for every value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace jaccl {

enum class Dtype : uint8_t {
  kBool = 0,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kCount,
};

size_t dtype_size(Dtype dtype);
const char* dtype_name(Dtype dtype);

// The type partial results are kept in: float32 for the 16-bit floats, the
// element type itself otherwise.
Dtype accumulator_dtype(Dtype dtype);

// Floating-point types: their sums round, so a fold's bits depend on its order.
bool is_float(Dtype dtype);

}  // namespace jaccl
