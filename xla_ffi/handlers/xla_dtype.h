// The engine's Dtype of an XLA element type, shared by the CPU and the CUDA handlers.
//
// Contract: dtype_of_xla() returns false (and leaves *dtype alone) for element types the
// engine does not move.
#pragma once

#include "common/dtype.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl {

inline bool dtype_of_xla(xla::ffi::DataType type, Dtype* dtype) {
  using xla::ffi::DataType;
  switch (type) {
    case DataType::PRED: *dtype = Dtype::kBool; return true;
    case DataType::S8: *dtype = Dtype::kI8; return true;
    case DataType::S16: *dtype = Dtype::kI16; return true;
    case DataType::S32: *dtype = Dtype::kI32; return true;
    case DataType::S64: *dtype = Dtype::kI64; return true;
    case DataType::U8: *dtype = Dtype::kU8; return true;
    case DataType::U16: *dtype = Dtype::kU16; return true;
    case DataType::U32: *dtype = Dtype::kU32; return true;
    case DataType::U64: *dtype = Dtype::kU64; return true;
    case DataType::F16: *dtype = Dtype::kF16; return true;
    case DataType::BF16: *dtype = Dtype::kBF16; return true;
    case DataType::F32: *dtype = Dtype::kF32; return true;
    case DataType::F64: *dtype = Dtype::kF64; return true;
    default: return false;
  }
}

// The Dtype an MoE exchange moves rows of `type` as: the engine's own types, and the 8-bit
// floats (FP8 dispatch) as bytes, which an exchange only copies (nothing adds them).
inline bool row_dtype_of_xla(xla::ffi::DataType type, Dtype* dtype) {
  using xla::ffi::DataType;
  if (type == DataType::F8E4M3FN || type == DataType::F8E5M2) {
    *dtype = Dtype::kU8;
    return true;
  }
  return dtype_of_xla(type, dtype);
}

}  // namespace jaccl
