// What every CPU FFI handler turns its failures into.
//
// Contract: to_ffi() is the ffi::Error of an engine call's failure (collectives/run.h;
// Success for none); unsupported_type() is the error for an element type the engine does not
// move.
#pragma once

#include <cstdint>
#include <optional>

#include "collectives/run.h"
#include "handlers/ffi_status.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl {

xla::ffi::Error unsupported_type(CollectiveKind kind, xla::ffi::DataType type);

inline xla::ffi::Error to_ffi(const std::optional<Failure>& failure) {
  if (!failure) return xla::ffi::Error::Success();
  return xla::ffi::Error(error_code(failure->kind), failure->message);
}

}  // namespace jaccl
