// ragged_all_to_all's index arrays (input_offsets, send_sizes, output_offsets, recv_sizes) as
// the engine reads them, from the int32 or int64 buffers the program passes; shared by the CPU
// handler and the CUDA handler's host job.
//
// Contract: widen_indices() returns the entries as int64, or false for another element type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace jaccl {

inline bool widen_indices(const void* data, xla::ffi::DataType type, size_t entries,
                          std::vector<int64_t>* out) {
  out->resize(entries);
  if (type == xla::ffi::DataType::S64) {
    std::memcpy(out->data(), data, entries * sizeof(int64_t));
    return true;
  }
  if (type == xla::ffi::DataType::S32) {
    const int32_t* p = static_cast<const int32_t*>(data);
    for (size_t i = 0; i < entries; ++i) (*out)[i] = p[i];
    return true;
  }
  return false;
}

}  // namespace jaccl
