// XLA FFI handlers for the MoE ops on CUDA devices, staged: every operand is copied into
// pinned host memory on XLA's stream, the CPU engine's MoE code (jaccl_run_host_moe, the
// very code of the CPU handlers) runs on the device's worker thread, and the result is copied
// back. The semantics, the validation of every list and expert id, the determinism and the
// remote-first schedule are therefore exactly the CPU path's.
//
// Contract: the same names, operands and attributes as the CPU MoE handlers, for platform
// CUDA, plus XLA's stream; never command-buffer compatible. Failures behave as on the
// staged collective path (cuda_staging.h).
#include <cuda_runtime.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/kinds.h"
#include "common/dtype.h"
#include "handlers/cuda_handlers.h"
#include "handlers/cuda_staging.h"
#include "handlers/engine_api.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl::cuda {
namespace {

JacclRunHostMoe moe_engine = nullptr;

using Ints = ffi::Buffer<ffi::DataType::S32>;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

size_t leading(const ffi::AnyBuffer& b) {
  auto dims = b.dimensions();
  return dims.size() == 0 ? 1 : static_cast<size_t>(dims[0]);
}

// Copies every operand the call points at (device memory) into pinned host memory, runs the
// engine on the host copies, and copies the result back into the call's (device) output.
ffi::Error staged_moe(int ordinal, cudaStream_t stream, const JacclHostMoeCall& call,
                      size_t out_bytes) {
  if (moe_engine == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaccl: the CUDA handlers have no engine (import jax_jaccl first)");
  }
  if (std::string why = pending_error(ordinal); !why.empty()) {
    return ffi::Error(ffi::ErrorCode::kUnavailable,
                      "jaccl: an earlier collective on this GPU failed: " + why);
  }
  JacclHostMoeCall host_call = call;
  // (where the field of host_call lives, the device data, its bytes)
  std::vector<std::tuple<const void**, const void*, size_t>> inputs;
  inputs.emplace_back(&host_call.rows, call.rows,
                      call.rows_count * call.row_elems * dtype_size(static_cast<Dtype>(call.dtype)));
  for (int i = 0; i < 4; ++i) {
    inputs.emplace_back(reinterpret_cast<const void**>(&host_call.lists[i]), call.lists[i],
                        call.list_counts[i] * sizeof(int32_t));
  }
  if (call.kind == static_cast<int32_t>(CollectiveKind::kMoeDispatch)) {
    inputs.emplace_back(reinterpret_cast<const void**>(&host_call.topk_idx), call.topk_idx,
                        call.topk_count * sizeof(int32_t));
  } else {
    inputs.emplace_back(&host_call.extra, call.extra,
                        call.extra_count * dtype_size(static_cast<Dtype>(call.extra_dtype)));
  }
  size_t total = 0;
  for (const auto& input : inputs) total = round_up(total + std::get<2>(input), 256);
  char* host = nullptr;
  if (ffi::Error e = staging_memory(ordinal, total + out_bytes, stream, &host); e.failure()) return e;
  size_t offset = 0;
  for (const auto& [field, device, bytes] : inputs) {
    *field = host + offset;
    if (bytes > 0) {
      cudaError_t err = cudaMemcpyAsync(host + offset, device, bytes, cudaMemcpyDeviceToHost, stream);
      if (err != cudaSuccess) return cuda_error(err, "staging an MoE operand");
    }
    offset = round_up(offset + bytes, 256);
  }
  host_call.out = host + total;
  std::vector<int64_t> groups(call.groups, call.groups + call.groups_len);
  ffi::Error enqueued = enqueue_host_job(
      ordinal, call.device, stream,
      [host_call, groups = std::move(groups)](char* error, size_t len) mutable {
        host_call.groups = groups.data();
        host_call.groups_len = groups.size();
        return moe_engine(&host_call, error, len);
      });
  if (enqueued.failure()) return enqueued;
  cudaError_t err = cudaMemcpyAsync(call.out, host + total, out_bytes, cudaMemcpyHostToDevice, stream);
  if (err != cudaSuccess) return cuda_error(err, "copying an MoE result back");
  return ffi::Error::Success();
}

// Fills what both ops share; `inputs` gets the rows and the four lists.
ffi::Error describe(int32_t ordinal, CollectiveKind kind, ffi::Span<const int64_t> groups,
                    int64_t group_size, const ffi::AnyBuffer& rows, const Ints* const lists[4],
                    ffi::AnyBuffer& out, JacclHostMoeCall* call) {
  int64_t device;
  if (ffi::Error e = global_device(ordinal, &device); e.failure()) return e;
  bool ok;
  const Dtype dtype = dtype_of(rows.element_type(), &ok);
  if (!ok) return ffi::Error::InvalidArgument("jaccl: unsupported MoE row type on CUDA");
  *call = JacclHostMoeCall{};
  call->kind = static_cast<int32_t>(kind);
  call->device = device;
  call->groups = groups.begin();
  call->groups_len = groups.size();
  call->group_size = group_size;
  call->dtype = static_cast<int32_t>(dtype);
  call->rows = rows.untyped_data();
  call->rows_count = leading(rows);
  call->row_elems = call->rows_count == 0 ? 0 : rows.element_count() / call->rows_count;
  for (int i = 0; i < 4; ++i) {
    call->lists[i] = lists[i]->typed_data();
    call->list_counts[i] = lists[i]->element_count();
  }
  call->out = out.untyped_data();
  call->out_rows = leading(out);
  call->out_count = out.element_count();
  return ffi::Error::Success();
}

ffi::Error Exchange(cudaStream_t stream, int32_t ordinal, ffi::Token, ffi::AnyBuffer src,
                    Ints send_rows, Ints send_offsets, Ints recv_rows, Ints recv_offsets,
                    Ints topk_idx, ffi::Result<ffi::Token>, ffi::Result<ffi::AnyBuffer> dst,
                    ffi::Span<const int64_t> groups, int64_t group_size, int64_t num_experts) {
  const Ints* lists[4] = {&send_rows, &send_offsets, &recv_rows, &recv_offsets};
  JacclHostMoeCall call;
  if (ffi::Error e = describe(ordinal, CollectiveKind::kMoeDispatch, groups, group_size, src,
                              lists, *dst, &call);
      e.failure()) {
    return e;
  }
  call.topk_idx = topk_idx.typed_data();
  call.topk_count = topk_idx.element_count();
  call.num_experts = num_experts;
  return staged_moe(ordinal, stream, call, dst->size_bytes());
}

ffi::Error Combine(cudaStream_t stream, int32_t ordinal, ffi::Token, ffi::AnyBuffer y,
                   Ints send_rows, Ints send_offsets, Ints recv_pairs, Ints recv_offsets,
                   ffi::AnyBuffer weights_or_dout, ffi::Result<ffi::Token>,
                   ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                   int64_t group_size, int64_t topk, int64_t pair_dot) {
  const Ints* lists[4] = {&send_rows, &send_offsets, &recv_pairs, &recv_offsets};
  JacclHostMoeCall call;
  if (ffi::Error e = describe(ordinal, CollectiveKind::kMoeCombine, groups, group_size, y, lists,
                              *out, &call);
      e.failure()) {
    return e;
  }
  bool ok;
  call.extra = weights_or_dout.untyped_data();
  call.extra_count = weights_or_dout.element_count();
  call.extra_dtype = static_cast<int32_t>(dtype_of(weights_or_dout.element_type(), &ok));
  call.topk = topk;
  call.pair_dot = static_cast<int32_t>(pair_dot);
  return staged_moe(ordinal, stream, call, out->size_bytes());
}

}  // namespace

void set_moe_engine(JacclRunHostMoe run) { moe_engine = run; }

}  // namespace jaccl::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_moe_exchange, jaccl::cuda::Exchange,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::Token>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Ret<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("num_experts"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_moe_combine, jaccl::cuda::Combine,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::Token>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::S32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::Token>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("topk")
                                  .Attr<int64_t>("pair_dot"));
