// What every CPU FFI handler does around its work: run it as one call of the engine
// (collectives/run.h: world, communicator, member, sequence number) and turn its failure into
// an ffi::Error.
//
// Contract: with_call(kind, device, groups, group_size, dtype, op_count, body) runs
// body(Call&) through run_call; body throws jaccl::Error on failure. Never throws itself.
// to_ffi() is the ffi::Error of a failure (Success for none); unsupported_type() is the error
// for an element type the engine does not move.
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

template <typename Body>
xla::ffi::Error with_call(CollectiveKind kind, int64_t device, xla::ffi::Span<const int64_t> groups,
                          int64_t group_size, Dtype dtype, uint64_t op_count, Body&& body) {
  return to_ffi(run_call(kind, device, groups.begin(), groups.size(), group_size, dtype, op_count,
                         std::forward<Body>(body)));
}

}  // namespace jaccl
