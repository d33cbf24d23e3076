// The CPU FFI handler symbols (defined with XLA_FFI_DEFINE_HANDLER_SYMBOL).
#pragma once

#include "xla/ffi/api/c_api.h"

extern "C" {
XLA_FFI_Error* jaccl_all_reduce(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_reduce_scatter(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_all_gather(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_all_to_all(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_moe_dispatch(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_moe_combine(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_ppermute(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_ragged_all_to_all(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jaccl_ragged_all_to_all_into_zeros(XLA_FFI_CallFrame* frame);
}
