// XLA FFI handlers for the MoE row exchanges (moe/moe.h): dispatch-direction exchange,
// combine (weighted sum) and the per-pair dot product combine's gradient needs.
//
// Contract: routing lists arrive as int32 buffers computed in the program; every list and
// every expert id is validated here (a bad value is an error, never a stray access). The
// handlers describe their buffers as a JacclHostMoeCall (engine_api.h), the form in which the
// CUDA staged path hands host copies of its device buffers to the same code.
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>

#include "handlers/order_operand.h"
#include "handlers/buffer_shape.h"
#include "handlers/call_setup.h"
#include "handlers/cpu_handlers.h"
#include "handlers/engine_api.h"
#include "moe/moe.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl {
namespace {

using Ints = ffi::Buffer<ffi::DataType::S32>;

RowLists lists_of(const Call& call, const JacclHostMoeCall& c) {
  const size_t n = static_cast<size_t>(call.member->size) + 1;
  if (c.list_counts[kJacclMoeSendOffsets] != n || c.list_counts[kJacclMoeRecvOffsets] != n) {
    throw_error(ErrorKind::kInvalidArgument, "MoE offsets need ", n, " entries (group size + 1)");
  }
  return RowLists{c.lists[kJacclMoeSendRows], c.lists[kJacclMoeSendOffsets],
                  c.list_counts[kJacclMoeSendRows], c.lists[kJacclMoeRecvRows],
                  c.lists[kJacclMoeRecvOffsets], c.list_counts[kJacclMoeRecvRows]};
}

void exchange(Call& call, const JacclHostMoeCall& c) {
  for (size_t i = 0; i < c.topk_count; ++i) {
    if (c.topk_idx[i] < -1 || c.topk_idx[i] >= c.num_experts) {
      throw_error(ErrorKind::kInvalidArgument, "moe_dispatch: expert id ", c.topk_idx[i],
                  " at flat index ", i, " of topk_idx is out of range [-1, ", c.num_experts, ")");
    }
  }
  if (c.out_rows * c.row_elems != c.out_count) {
    throw_error(ErrorKind::kInvalidArgument, "MoE exchange rows differ in length");
  }
  moe_exchange(call, c.rows, c.rows_count, c.out, c.out_rows, c.row_elems, lists_of(call, c),
               moe_schedule_from_env());
}

void combine(Call& call, const JacclHostMoeCall& c) {
  CombineArgs args;
  args.y = c.rows;
  args.y_rows = c.rows_count;
  args.row_elems = c.row_elems;
  args.topk = static_cast<size_t>(c.topk);
  args.tokens = c.out_rows;
  args.out = c.out;
  args.pair_dot = c.pair_dot != 0;
  if (c.out_count != args.tokens * (args.pair_dot ? args.topk : args.row_elems)) {
    throw_error(ErrorKind::kInvalidArgument, "moe_combine: the output must be [tokens, ",
                args.pair_dot ? "k" : "hidden", "]");
  }
  if (args.pair_dot) {
    if (c.extra_dtype != c.dtype || c.extra_count != args.tokens * args.row_elems) {
      throw_error(ErrorKind::kInvalidArgument, "moe pair_dot: dout must be [tokens, hidden] of y's dtype");
    }
    args.dout = c.extra;
  } else {
    if (c.extra_dtype != static_cast<int32_t>(Dtype::kF32) || c.extra_count != args.tokens * args.topk) {
      throw_error(ErrorKind::kInvalidArgument, "moe_combine: topk_weights must be float32 [tokens, k]");
    }
    args.weights = static_cast<const float*>(c.extra);
  }
  moe_combine(call, args, lists_of(call, c), moe_schedule_from_env());
}

ffi::Error run_moe(const JacclHostMoeCall& c) {
  const auto kind = static_cast<CollectiveKind>(c.kind);
  ffi::Span<const int64_t> groups(c.groups, c.groups_len);
  return with_call(kind, c.device, groups, c.group_size, static_cast<Dtype>(c.dtype),
                   c.rows_count * c.row_elems, [&](Call& call) {
    if (kind == CollectiveKind::kMoeDispatch) {
      exchange(call, c);
    } else {
      combine(call, c);
    }
  });
}

JacclHostMoeCall moe_call(CollectiveKind kind, int64_t device, ffi::Span<const int64_t> groups,
                          int64_t group_size, const ffi::AnyBuffer& rows,
                          std::initializer_list<Ints> lists, ffi::AnyBuffer& out) {
  JacclHostMoeCall c{};
  c.kind = static_cast<int32_t>(kind);
  c.device = device;
  c.groups = groups.begin();
  c.groups_len = groups.size();
  c.group_size = group_size;
  c.dtype = static_cast<int32_t>(dtype_from_xla(rows.element_type()));
  c.rows = rows.untyped_data();
  c.rows_count = leading(rows);
  c.row_elems = trailing(rows);
  int i = 0;
  for (const Ints& list : lists) {
    c.lists[i] = list.typed_data();
    c.list_counts[i++] = list.element_count();
  }
  c.out = out.untyped_data();
  c.out_rows = leading(out);
  c.out_count = out.element_count();
  return c;
}

ffi::Error ExchangeImpl(int32_t device, OrderIn, ffi::AnyBuffer src, Ints send_rows,
                        Ints send_offsets, Ints recv_rows, Ints recv_offsets, Ints topk_idx,
                        OrderOut, ffi::Result<ffi::AnyBuffer> dst,
                        ffi::Span<const int64_t> groups, int64_t group_size, int64_t num_experts) {
  JacclHostMoeCall c;
  try {
    c = moe_call(CollectiveKind::kMoeDispatch, device, groups, group_size, src,
                 {send_rows, send_offsets, recv_rows, recv_offsets}, *dst);
  } catch (const Error& e) {
    return ffi::Error(error_code(e.kind()), e.what());
  }
  c.topk_idx = topk_idx.typed_data();
  c.topk_count = topk_idx.element_count();
  c.num_experts = num_experts;
  return run_moe(c);
}

ffi::Error CombineImpl(int32_t device, OrderIn, ffi::AnyBuffer y, Ints send_rows,
                       Ints send_offsets, Ints recv_pairs, Ints recv_offsets,
                       ffi::AnyBuffer weights_or_dout, OrderOut,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                       int64_t group_size, int64_t topk, int64_t pair_dot) {
  JacclHostMoeCall c;
  try {
    c = moe_call(CollectiveKind::kMoeCombine, device, groups, group_size, y,
                 {send_rows, send_offsets, recv_pairs, recv_offsets}, *out);
    c.extra_dtype = static_cast<int32_t>(dtype_from_xla(weights_or_dout.element_type()));
  } catch (const Error& e) {
    return ffi::Error(error_code(e.kind()), e.what());
  }
  c.extra = weights_or_dout.untyped_data();
  c.extra_count = weights_or_dout.element_count();
  c.topk = topk;
  c.pair_dot = static_cast<int32_t>(pair_dot);
  return run_moe(c);
}

}  // namespace
}  // namespace jaccl

extern "C" int jaccl_run_host_moe(const JacclHostMoeCall* c, char* error, size_t error_len) {
  ffi::Error result = jaccl::run_moe(*c);
  if (result.success()) return 0;
  std::snprintf(error, error_len, "%s", result.message().c_str());
  return 1;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_moe_exchange, jaccl::ExchangeImpl,
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
                                  .Attr<int64_t>("topk")
                                  .Attr<int64_t>("pair_dot"));
