// The emulated module's FFI entry points (tests only; its registrations() hands them out:
// build.py compiles module.cc with each handler's name mapped to its emulated_ wrapper here):
// each runs jaccl's CUDA handler, then waits for its device's emulated stream, since XLA:CPU reads a result as soon as the handler
// returns. A context that trapped meanwhile makes the call fail, as XLA fails the next launch
// on a GPU whose context stopped.
#include <cuda_runtime.h>

#include <cstring>

#include "handlers/cuda/symbols.h"
#include "xla/ffi/api/c_api.h"

namespace {

XLA_FFI_Error* finish(XLA_FFI_CallFrame* frame, XLA_FFI_Error* error) {
  if (!jaccl_emu::finish_current_device() && error == nullptr) {
    static const char kMessage[] = "emulated GPU: unspecified launch failure (its context trapped)";
    XLA_FFI_Error_Create_Args args;
    std::memset(&args, 0, sizeof args);
    args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    args.message = kMessage;
    args.errc = XLA_FFI_Error_Code_INTERNAL;
    return frame->api->XLA_FFI_Error_Create(&args);
  }
  return error;
}

}  // namespace

#define JACCL_EMULATED_ENTRY(name)                                                          \
  extern "C" XLA_FFI_Error* emulated_##name(XLA_FFI_CallFrame* frame) {                    \
    return finish(frame, name(frame));                                                      \
  }

JACCL_EMULATED_ENTRY(jaccl_cuda_all_reduce)
JACCL_EMULATED_ENTRY(jaccl_cuda_reduce_scatter)
JACCL_EMULATED_ENTRY(jaccl_cuda_all_gather)
JACCL_EMULATED_ENTRY(jaccl_cuda_all_to_all)
JACCL_EMULATED_ENTRY(jaccl_cuda_moe_dispatch)
JACCL_EMULATED_ENTRY(jaccl_cuda_moe_combine)
JACCL_EMULATED_ENTRY(jaccl_cuda_ppermute)
JACCL_EMULATED_ENTRY(jaccl_cuda_ragged_all_to_all)
