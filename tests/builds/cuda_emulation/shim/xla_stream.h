// Force-included into the CUDA handlers of the emulated module (tests only): on the CPU
// devices that stand in for GPUs, XLA has no platform stream, so a handler's stream is the
// emulated stream of its device ordinal, and that device becomes the thread's current one.
#pragma once

#include <cuda_runtime.h>

#include <optional>

#include "xla/ffi/api/ffi.h"

namespace xla::ffi {

template <>
struct CtxDecoding<PlatformStream<cudaStream_t>> {
  using Type = cudaStream_t;

  static std::optional<Type> Decode(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                                    DiagnosticEngine& diagnostic) {
    const std::optional<int32_t> ordinal = CtxDecoding<DeviceOrdinal>::Decode(api, ctx, diagnostic);
    if (!ordinal) return std::nullopt;
    cudaSetDevice(*ordinal);
    return jaccl_emu::xla_stream(*ordinal);
  }
};

}  // namespace xla::ffi
