// XLA FFI handlers for the MoE row exchanges (moe/moe.h): dispatch-direction exchange,
// combine (weighted sum) and the per-pair dot product combine's gradient needs.
//
// Contract: routing lists arrive as int32 buffers computed in the program; every list and
// every expert id is validated here (a bad value is an error, never a stray access).
#include <cstring>
#include <string>

#include "handlers/call_setup.h"
#include "handlers/cpu_handlers.h"
#include "moe/moe.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl {
namespace {

using Ints = ffi::Buffer<ffi::DataType::S32>;

size_t leading(const ffi::AnyBuffer& b) {
  auto dims = b.dimensions();
  return dims.size() == 0 ? 1 : static_cast<size_t>(dims[0]);
}

size_t row_elems(const ffi::AnyBuffer& b) {
  size_t rows = leading(b);
  return rows == 0 ? 0 : b.element_count() / rows;
}

RowLists lists_of(const Call& call, Ints send_rows, Ints send_offsets, Ints recv_rows,
                  Ints recv_offsets) {
  const size_t n = static_cast<size_t>(call.member->size) + 1;
  if (send_offsets.element_count() != n || recv_offsets.element_count() != n) {
    throw_error(ErrorKind::kInvalidArgument, "MoE offsets need ", n, " entries (group size + 1)");
  }
  return RowLists{send_rows.typed_data(), send_offsets.typed_data(), send_rows.element_count(),
                  recv_rows.typed_data(), recv_offsets.typed_data(), recv_rows.element_count()};
}

ffi::Error ExchangeImpl(int32_t device, ffi::Token, ffi::AnyBuffer src, Ints send_rows,
                        Ints send_offsets, Ints recv_rows, Ints recv_offsets, Ints topk_idx,
                        ffi::Result<ffi::Token>, ffi::Result<ffi::AnyBuffer> dst,
                        ffi::Span<const int64_t> groups, int64_t group_size, int64_t num_experts) {
  return with_call(CollectiveKind::kMoeDispatch, device, groups, group_size,
                   dtype_from_xla(src.element_type()), src.element_count(), [&](Call& call) {
    const int32_t* ids = topk_idx.typed_data();
    for (size_t i = 0; i < topk_idx.element_count(); ++i) {
      if (ids[i] < -1 || ids[i] >= num_experts) {
        throw_error(ErrorKind::kInvalidArgument, "moe_dispatch: expert id ", ids[i],
                    " at flat index ", i, " of topk_idx is out of range [-1, ", num_experts, ")");
      }
    }
    if (row_elems(src) != row_elems(*dst)) {
      throw_error(ErrorKind::kInvalidArgument, "MoE exchange rows differ in length");
    }
    moe_exchange(call, src.untyped_data(), leading(src), dst->untyped_data(), leading(*dst),
                 row_elems(src), lists_of(call, send_rows, send_offsets, recv_rows, recv_offsets),
                 moe_schedule_from_env());
  });
}

ffi::Error CombineImpl(int32_t device, ffi::Token, ffi::AnyBuffer y, Ints send_rows,
                       Ints send_offsets, Ints recv_pairs, Ints recv_offsets,
                       ffi::AnyBuffer weights_or_dout, ffi::Result<ffi::Token>,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                       int64_t group_size, int64_t topk, int64_t pair_dot) {
  return with_call(CollectiveKind::kMoeCombine, device, groups, group_size,
                   dtype_from_xla(y.element_type()), y.element_count(), [&](Call& call) {
    CombineArgs args;
    args.y = y.untyped_data();
    args.y_rows = leading(y);
    args.row_elems = row_elems(y);
    args.topk = static_cast<size_t>(topk);
    args.tokens = leading(*out);
    args.out = out->untyped_data();
    args.pair_dot = pair_dot != 0;
    if (args.pair_dot) {
      if (weights_or_dout.element_type() != y.element_type() ||
          weights_or_dout.element_count() != args.tokens * args.row_elems) {
        throw_error(ErrorKind::kInvalidArgument, "moe pair_dot: dout must be [tokens, hidden] of y's dtype");
      }
      args.dout = weights_or_dout.untyped_data();
    } else {
      if (weights_or_dout.element_type() != ffi::DataType::F32 ||
          weights_or_dout.element_count() != args.tokens * args.topk) {
        throw_error(ErrorKind::kInvalidArgument, "moe_combine: topk_weights must be float32 [tokens, k]");
      }
      args.weights = static_cast<const float*>(weights_or_dout.untyped_data());
    }
    moe_combine(call, args, lists_of(call, send_rows, send_offsets, recv_pairs, recv_offsets),
                moe_schedule_from_env());
  });
}

}  // namespace
}  // namespace jaccl

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_moe_exchange, jaccl::ExchangeImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::Token>()
                                  .Arg<ffi::AnyBuffer>()                  // rows to send
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // send rows
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // send offsets [R+1]
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // receive rows
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // receive offsets
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // topk_idx (checked)
                                  .Ret<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()                  // received rows
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("num_experts"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_moe_combine, jaccl::CombineImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::Token>()
                                  .Arg<ffi::AnyBuffer>()                  // expert outputs y
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // y rows per source
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // their offsets
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // pairs per expert rank
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()  // their offsets
                                  .Arg<ffi::AnyBuffer>()                  // weights [T,K] or dout [T,H]
                                  .Ret<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()                  // out [T,H] or dots [T,K]
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("topk")
                                  .Attr<int64_t>("pair_dot"));
