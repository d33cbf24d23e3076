// ragged_all_to_all's part of a request (collectives/request.h) from XLA's buffers, shared by
// the CPU and the CUDA handler.
//
// Contract: set_ragged() fills the four index arrays (int32 or int64 buffers as the program
// passed them; another element type is recorded as 0 bytes, which check_request() refuses) and
// the rows of the operand and the output (out_rows of them).
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

}  // namespace jaccl
