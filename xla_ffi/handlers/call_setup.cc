#include "handlers/call_setup.h"

#include <string>

#include "handlers/xla_dtype.h"

namespace ffi = xla::ffi;

namespace jaccl {

Dtype dtype_from_xla(ffi::DataType type) {
  Dtype dtype;
  if (!dtype_of_xla(type, &dtype)) {
    throw_error(ErrorKind::kInvalidArgument, "unsupported element type ", static_cast<int>(type));
  }
  return dtype;
}

ffi::Error unsupported_type(CollectiveKind kind, ffi::DataType type) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument,
                    std::string("jaccl: ") + kind_name(kind) + " does not move element type " +
                        std::to_string(static_cast<int>(type)));
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
