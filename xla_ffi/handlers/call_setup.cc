#include "handlers/call_setup.h"

namespace ffi = xla::ffi;

namespace jaccl {

Dtype dtype_from_xla(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::PRED: return Dtype::kBool;
    case ffi::DataType::S8: return Dtype::kI8;
    case ffi::DataType::S16: return Dtype::kI16;
    case ffi::DataType::S32: return Dtype::kI32;
    case ffi::DataType::S64: return Dtype::kI64;
    case ffi::DataType::U8: return Dtype::kU8;
    case ffi::DataType::U16: return Dtype::kU16;
    case ffi::DataType::U32: return Dtype::kU32;
    case ffi::DataType::U64: return Dtype::kU64;
    case ffi::DataType::F16: return Dtype::kF16;
    case ffi::DataType::BF16: return Dtype::kBF16;
    case ffi::DataType::F32: return Dtype::kF32;
    case ffi::DataType::F64: return Dtype::kF64;
    default:
      throw_error(ErrorKind::kInvalidArgument, "unsupported element type ",
                  static_cast<int>(type));
  }
}

ffi::ErrorCode error_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return ffi::ErrorCode::kInvalidArgument;
    case ErrorKind::kMismatch: return ffi::ErrorCode::kFailedPrecondition;
    case ErrorKind::kTimeout: return ffi::ErrorCode::kDeadlineExceeded;
    case ErrorKind::kPeerFailure: return ffi::ErrorCode::kUnavailable;
    default: return ffi::ErrorCode::kInternal;
  }
}

}  // namespace jaccl
