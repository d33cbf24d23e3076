// XLA FFI handlers for the MoE row exchanges (moe/moe.h): dispatch,
// combine (weighted sum) and the per-pair dot product combine's gradient needs.
//
// Contract: routing lists arrive as int32 buffers computed in the program; the handlers
// describe their buffers as a MoeRequest, and moe/run.h validates every list and expert id (a
// bad value is an error, never a stray access) as it does for the CUDA staged path's host
// copies (abi/host_abi.h). The request holds only pointers into XLA's buffers, which
// XLA keeps alive until the call's future completes (async_call.h).
#include <algorithm>
#include <vector>

#include "handlers/call_setup.h"
#include "handlers/cpu/async_call.h"
#include "handlers/cpu/symbols.h"
#include "handlers/moe_request.h"
#include "handlers/order_operand.h"
#include "handlers/xla_dtype.h"
#include "moe/run.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl {
namespace {

using Ints = MoeList32;

// Runs `r` at once or queued on its lane's call thread (async_call.h). Its buffers are XLA's,
// alive until the call completes; a queued call takes a copy of the group table.
ffi::Future finish_moe(MoeRequest r, size_t bytes) {
  const CallAddress& at = r.address;
  if (runs_now(at.device, at.lane, bytes)) return completed(to_ffi(run_moe(r)));
  std::vector<int64_t> table(at.groups, at.groups + at.groups_len);
  return queue(at.device, at.lane, [r, table]() mutable {
    r.address.groups = table.data();
    return run_moe(r);
  });
}

ffi::Future DispatchImpl(int32_t device, OrderIn, ffi::AnyBuffer src, Ints send_rows,
                        Ints send_offsets, Ints recv_rows, Ints recv_offsets, Ints topk_idx,
                        OrderOut, ffi::Result<ffi::AnyBuffer> dst,
                        ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                        int64_t lane, int64_t comm, int64_t num_experts) {
  Dtype dtype;
  if (!row_dtype_of_xla(src.element_type(), &dtype)) {
    return completed(unsupported_type(CollectiveKind::kMoeDispatch, src.element_type()));
  }
  const Ints* lists[4] = {&send_rows, &send_offsets, &recv_rows, &recv_offsets};
  MoeRequest r = moe_request(CollectiveKind::kMoeDispatch, device, groups, group_size, site,
                             lane, comm, dtype, src, lists, *dst);
  r.topk_idx = topk_idx.typed_data();
  r.topk_count = topk_idx.element_count();
  r.num_experts = num_experts;
  return finish_moe(r, std::max(src.size_bytes(), dst->size_bytes()));
}

ffi::Future CombineImpl(int32_t device, OrderIn, ffi::AnyBuffer y, Ints send_rows,
                       Ints send_offsets, Ints recv_pairs, Ints recv_offsets,
                       ffi::AnyBuffer weights_or_dout, OrderOut,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                       int64_t group_size, int64_t site, int64_t lane, int64_t comm,
                       int64_t topk, int64_t pair_dot) {
  Dtype dtype, extra_dtype;
  if (!dtype_of_xla(y.element_type(), &dtype)) {
    return completed(unsupported_type(CollectiveKind::kMoeCombine, y.element_type()));
  }
  if (!dtype_of_xla(weights_or_dout.element_type(), &extra_dtype)) {
    return completed(
        unsupported_type(CollectiveKind::kMoeCombine, weights_or_dout.element_type()));
  }
  const Ints* lists[4] = {&send_rows, &send_offsets, &recv_pairs, &recv_offsets};
  MoeRequest r = moe_request(CollectiveKind::kMoeCombine, device, groups, group_size, site,
                             lane, comm, dtype, y, lists, *out);
  r.extra = weights_or_dout.untyped_data();
  r.extra_count = weights_or_dout.element_count();
  r.extra_dtype = extra_dtype;
  r.topk = topk;
  r.pair_dot = pair_dot != 0;
  return finish_moe(r, std::max(y.size_bytes(), out->size_bytes()));
}

}  // namespace
}  // namespace jaccl

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_moe_dispatch, jaccl::DispatchImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()                  // rows to send
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // send rows
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // send offsets [R+1]
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // receive rows
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // receive offsets
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // topk_idx (checked)
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()                  // received rows
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("comm")
                                  .Attr<int64_t>("num_experts"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_moe_combine, jaccl::CombineImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()                  // expert outputs y
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // y rows per source
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // their offsets
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // pairs per expert rank
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // their offsets
                                  .Arg<ffi::AnyBuffer>()                  // weights [T,K] or dout [T,H]
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()                  // out [T,H] or dots [T,K]
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("comm")
                                  .Attr<int64_t>("topk")
                                  .Attr<int64_t>("pair_dot"));
