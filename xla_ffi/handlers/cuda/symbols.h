// The CUDA FFI handler symbols and the set-up they need from Python.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "abi/host_abi.h"
#include "xla/ffi/api/c_api.h"

extern "C" {
XLA_FFI_Error* jaccl_cuda_all_reduce(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_cuda_reduce_scatter(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_cuda_all_gather(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_cuda_all_to_all(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_cuda_moe_dispatch(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_cuda_moe_combine(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_cuda_ppermute(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_cuda_ragged_all_to_all(XLA_FFI_CallFrame* frame);
}

namespace jaccl::cuda {
void set_engine(JacclRunHostCall run);
void set_moe_engine(JacclRunHostMoe run);
}  // namespace jaccl::cuda
