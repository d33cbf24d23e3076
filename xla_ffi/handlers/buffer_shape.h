// Row views of XLA buffers, as the MoE handlers (CPU and CUDA) read them.
//
// Contract: leading(b) is the first dimension (1 for a scalar); trailing(b) the product of
// the others (elements per row, also when there are no rows).
#pragma once

#include <cstddef>

#include "xla/ffi/api/ffi.h"

namespace jaccl {

inline size_t leading(const xla::ffi::AnyBuffer& b) {
  auto dims = b.dimensions();
  return dims.size() == 0 ? 1 : static_cast<size_t>(dims[0]);
}

inline size_t trailing(const xla::ffi::AnyBuffer& b) {
  auto dims = b.dimensions();
  size_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= static_cast<size_t>(dims[i]);
  return n;
}

}  // namespace jaccl
