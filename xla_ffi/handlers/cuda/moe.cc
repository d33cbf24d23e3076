// XLA FFI handlers for the MoE ops on CUDA devices: XLA's buffers in, a request
// (moe/request.h) run on the peer path or staged through host memory (cuda/moe_paths.h), an
// ffi::Error out.
//
// Contract: the same names, operands and attributes as the CPU MoE handlers, for platform
// CUDA, plus XLA's stream; never command-buffer compatible. Failures behave as on the
// collective paths (cuda/collective_paths.h). The staged path runs the CPU engine that _jaccl
// owns through abi/host_abi.h (set_moe_engine).
#include <cuda_runtime.h>

#include "abi/host_abi.h"
#include "cuda/moe_paths.h"
#include "handlers/cuda/symbols.h"
#include "handlers/ffi_status.h"
#include "handlers/moe_request.h"
#include "handlers/order_operand.h"
#include "handlers/xla_dtype.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl::cuda {
namespace {

JacclRunHostMoe moe_engine = nullptr;

using Ints = MoeList32;

int run_on_host(const MoeRequest& request, char* error, size_t error_len) {
  return moe_engine(&request, error, error_len);
}

ffi::Error run(const MoeRequest& r, cudaStream_t stream, int32_t ordinal) {
  return to_ffi(run_moe_on_gpu(r, ordinal, stream, moe_engine == nullptr ? nullptr : run_on_host));
}

ffi::Error Dispatch(cudaStream_t stream, int32_t ordinal, OrderIn, ffi::AnyBuffer src,
                    Ints send_rows, Ints send_offsets, Ints recv_rows, Ints recv_offsets,
                    Ints topk_idx, OrderOut, ffi::Result<ffi::AnyBuffer> dst,
                    ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                    int64_t /*lane: GPU calls are stream-ordered*/,
                    int64_t /*comm: lane 0's is derived*/, int64_t num_experts) {
  Dtype dtype;  // FP8 rows as bytes
  if (!row_dtype_of_xla(src.element_type(), &dtype)) {
    return ffi::Error::InvalidArgument("jaccl: unsupported MoE row type on CUDA");
  }
  const Ints* lists[4] = {&send_rows, &send_offsets, &recv_rows, &recv_offsets};
  MoeRequest r = moe_request(CollectiveKind::kMoeDispatch, 0, groups, group_size, site, 0,
                             0, dtype, src, lists, *dst);
  r.topk_idx = topk_idx.typed_data();
  r.topk_count = topk_idx.element_count();
  r.num_experts = num_experts;
  return run(r, stream, ordinal);
}

ffi::Error Combine(cudaStream_t stream, int32_t ordinal, OrderIn, ffi::AnyBuffer y,
                   Ints send_rows, Ints send_offsets, Ints recv_pairs, Ints recv_offsets,
                   ffi::AnyBuffer weights_or_dout, OrderOut,
                   ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                   int64_t group_size, int64_t site, int64_t /*lane*/, int64_t /*comm*/,
                   int64_t topk, int64_t pair_dot) {
  Dtype dtype, extra_dtype;  // FP8 rows are refused by check_moe_request
  if (!row_dtype_of_xla(y.element_type(), &dtype)) {
    return ffi::Error::InvalidArgument("jaccl: unsupported MoE row type on CUDA");
  }
  if (!dtype_of_xla(weights_or_dout.element_type(), &extra_dtype)) {
    return ffi::Error::InvalidArgument("jaccl: moe_combine: unsupported weights/dout type on CUDA");
  }
  const Ints* lists[4] = {&send_rows, &send_offsets, &recv_pairs, &recv_offsets};
  MoeRequest r = moe_request(CollectiveKind::kMoeCombine, 0, groups, group_size, site, 0,
                             0, dtype, y, lists, *out);
  r.extra = weights_or_dout.untyped_data();
  r.extra_count = weights_or_dout.element_count();
  r.extra_dtype = extra_dtype;
  r.topk = topk;
  r.pair_dot = pair_dot != 0;
  return run(r, stream, ordinal);
}

}  // namespace

void set_moe_engine(JacclRunHostMoe run) { moe_engine = run; }

}  // namespace jaccl::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_moe_dispatch, jaccl::cuda::Dispatch,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("comm")
                                  .Attr<int64_t>("num_experts"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_moe_combine, jaccl::cuda::Combine,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("comm")
                                  .Attr<int64_t>("topk")
                                  .Attr<int64_t>("pair_dot"));
