// ragged_all_to_all's part of a request (collectives/request.h) from XLA's buffers, shared by
// the CPU and the CUDA handler.
//
// Contract: set_ragged() fills the four index arrays (int32 or int64 buffers as the program
// passed them; another element type is recorded as 0 bytes, which check_request() refuses) and
// the rows of the operand and the output (out_rows of them). output_error() is the error of an
// output operand and a result (which XLA aliases) that are not the same array, Success else.
#pragma once

#include <cstddef>

#include "collectives/request.h"
#include "handlers/buffer_shape.h"
#include "xla/ffi/api/ffi.h"

namespace jaccl {

inline void set_ragged(CollectiveRequest* r, const xla::ffi::AnyBuffer& operand, size_t out_rows,
                       const xla::ffi::AnyBuffer* const indices[4]) {
  for (int i = 0; i < 4; ++i) {
    const xla::ffi::DataType type = indices[i]->element_type();
    r->ragged[i] = IndexArray{indices[i]->untyped_data(), indices[i]->element_count(),
                              type == xla::ffi::DataType::S64   ? 8
                              : type == xla::ffi::DataType::S32 ? 4
                                                                : 0};
  }
  r->in_rows = leading(operand);
  r->out_rows = out_rows;
  r->row_elems = trailing(operand);
}

inline xla::ffi::Error output_error(const xla::ffi::AnyBuffer& output,
                                    const xla::ffi::AnyBuffer& result) {
  if (output.element_count() == result.element_count() &&
      output.element_type() == result.element_type()) {
    return xla::ffi::Error::Success();
  }
  return xla::ffi::Error::InvalidArgument("jaccl: ragged_all_to_all's output and result differ");
}

}  // namespace jaccl
