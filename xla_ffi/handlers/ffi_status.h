// The engine's failures as XLA FFI errors: its error kinds mapped to XLA's codes, and a
// Status (common/status.h) or a Failure (collectives/run.h) turned into an ffi::Error.
#pragma once

#include "common/status.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl {

inline xla::ffi::ErrorCode error_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return xla::ffi::ErrorCode::kInvalidArgument;
    case ErrorKind::kMismatch: return xla::ffi::ErrorCode::kFailedPrecondition;
    case ErrorKind::kTimeout: return xla::ffi::ErrorCode::kDeadlineExceeded;
    case ErrorKind::kPeerFailure: return xla::ffi::ErrorCode::kUnavailable;
    case ErrorKind::kFailedPrecondition: return xla::ffi::ErrorCode::kFailedPrecondition;
    default: return xla::ffi::ErrorCode::kInternal;
  }
}

inline xla::ffi::Error to_ffi(const Status& status) {
  if (status.success()) return xla::ffi::Error::Success();
  return xla::ffi::Error(error_code(status.kind()), status.message());
}

}  // namespace jaccl
