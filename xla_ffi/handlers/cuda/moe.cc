// XLA FFI handlers for the MoE ops on CUDA devices. Groups of GPUs of this host whose rows fit
// the staging area take the peer path (cuda/peer_moe.h: kernels, rows GPU to GPU). Others are
// staged: every operand is copied into pinned host memory on XLA's stream, the CPU engine's
// MoE code (jaccl_run_host_moe, the very code of the CPU handlers) runs on the device's worker
// thread, and the result is copied back, so semantics, validation, determinism and the
// remote-first schedule across hosts are exactly the CPU path's. JACCL_CUDA_PATH applies as
// for the collectives.
//
// Contract: the same names, operands and attributes as the CPU MoE handlers, for platform
// CUDA, plus XLA's stream; never command-buffer compatible. Failures behave as on the
// collective paths (cuda/peers.h, cuda/staging.h).
#include <cuda_runtime.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/kinds.h"
#include "comm/lanes.h"
#include "common/dtype.h"
#include "handlers/order_operand.h"
#include "handlers/buffer_shape.h"
#include "handlers/cuda/symbols.h"
#include "cuda/peer_moe.h"
#include "cuda/peer_group.h"
#include "cuda/peers.h"
#include "cuda/staging.h"
#include "handlers/ffi_status.h"
#include "handlers/xla_dtype.h"
#include "handlers/host_abi.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl::cuda {
namespace {

JacclRunHostMoe moe_engine = nullptr;

using Ints = ffi::Buffer<ffi::DataType::S32>;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

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
  StagedCall staging;
  Status result = StagedCall::begin(ordinal, stream, total + out_bytes, &staging);
  if (result.success()) {
    char* host = staging.host();
    size_t offset = 0;
    for (const auto& [field, device, bytes] : inputs) {
      *field = host + offset;
      if (bytes > 0 && result.success()) {
        cudaError_t err = cudaMemcpyAsync(host + offset, device, bytes, cudaMemcpyDeviceToHost, stream);
        if (err != cudaSuccess) result = cuda_error(err, "staging an MoE operand");
      }
      offset = round_up(offset + bytes, 256);
    }
    host_call.out = host + total;
    std::vector<int64_t> groups(call.groups, call.groups + call.groups_len);
    if (result.success()) {
      result = staging.enqueue([host_call, groups = std::move(groups)](char* error, size_t len) mutable {
        host_call.groups = groups.data();
        host_call.groups_len = groups.size();
        return moe_engine(&host_call, error, len);
      });
    }
    if (result.success()) {
      cudaError_t err = cudaMemcpyAsync(call.out, host + total, out_bytes, cudaMemcpyHostToDevice, stream);
      if (err != cudaSuccess) result = cuda_error(err, "copying an MoE result back");
    }
  }
  if (result.failure()) raise_abort(result.message());  // the peers' engine jobs stop too
  return to_ffi(result);
}

ffi::Error invalid(const std::string& what) { return ffi::Error::InvalidArgument("jaccl: " + what); }

// The checks the CPU code makes on the shapes, made here before the peer path enqueues.
ffi::Error check_shapes(const JacclHostMoeCall& c) {
  // An exchange moves rows as bytes (FP8 ones too); combine adds them: floats only.
  const auto dtype = static_cast<Dtype>(c.dtype);
  if (c.kind == static_cast<int32_t>(CollectiveKind::kMoeCombine) && dtype != Dtype::kF32 &&
      dtype != Dtype::kBF16 && dtype != Dtype::kF16) {
    return invalid(std::string("MoE rows must be float32, bfloat16 or float16, not ") + dtype_name(dtype));
  }
  const uint64_t n = static_cast<uint64_t>(c.group_size) + 1;
  if (c.list_counts[kJacclMoeSendOffsets] != n || c.list_counts[kJacclMoeRecvOffsets] != n) {
    return invalid("MoE offsets need " + std::to_string(n) + " entries (group size + 1)");
  }
  if (c.kind == static_cast<int32_t>(CollectiveKind::kMoeDispatch)) {
    if (c.out_rows * c.row_elems != c.out_count) return invalid("MoE exchange rows differ in length");
  } else if (c.out_count != c.out_rows * (c.pair_dot ? static_cast<uint64_t>(c.topk) : c.row_elems)) {
    return invalid(std::string("moe_combine: the output must be [tokens, ") +
                   (c.pair_dot ? "k" : "hidden") + "]");
  } else if (c.pair_dot) {
    if (c.extra_dtype != c.dtype || c.extra_count != c.out_rows * c.row_elems) {
      return invalid("moe pair_dot: dout must be [tokens, hidden] of y's dtype");
    }
  } else if (c.extra_dtype != static_cast<int32_t>(Dtype::kF32) ||
             c.extra_count != c.out_rows * static_cast<uint64_t>(c.topk)) {
    return invalid("moe_combine: topk_weights must be float32 [tokens, k]");
  }
  return ffi::Error::Success();
}

PeerMoeCall peer_call(const JacclHostMoeCall& c, size_t out_bytes) {
  PeerMoeCall p;
  p.combine = c.kind == static_cast<int32_t>(CollectiveKind::kMoeCombine);
  p.dtype = static_cast<Dtype>(c.dtype);
  p.rows = static_cast<const char*>(c.rows);
  p.rows_count = c.rows_count;
  p.row_bytes = c.row_elems * dtype_size(p.dtype);
  for (int i = 0; i < 4; ++i) p.lists[i] = c.lists[i];
  p.send_capacity = c.list_counts[kJacclMoeSendRows];
  p.recv_capacity = c.list_counts[kJacclMoeRecvRows];
  p.topk_idx = c.topk_idx;
  p.topk_count = c.topk_count;
  p.num_experts = c.num_experts;
  p.site = c.site;
  if (p.combine && c.pair_dot) p.dout = c.extra;
  if (p.combine && !c.pair_dot) p.weights = static_cast<const float*>(c.extra);
  p.tokens = c.out_rows;
  p.topk = static_cast<size_t>(c.topk);
  p.out = c.out;
  p.out_rows = c.out_rows;
  p.out_bytes = out_bytes;
  return p;
}

// Either path, chosen the same way on every rank of the group.
ffi::Error run(int32_t ordinal, cudaStream_t stream, const JacclHostMoeCall& call,
               ffi::Span<const int64_t> groups, size_t out_bytes) {
  LocalDevice* local = local_device(ordinal);
  if (local != nullptr) {
    if (std::string why = failure(*local); !why.empty()) {
      return ffi::Error(ffi::ErrorCode::kUnavailable, why);
    }
  }
  int rank = 0;
  const std::vector<int64_t> members = group_members(groups.begin(), groups.size(), call.group_size, call.device, &rank);
  if (members.empty()) return invalid("the device is in none of the call's groups");
  if (ffi::Error e = check_shapes(call); e.failure()) return e;
  const PathMode mode = path_mode();
  if (mode != PathMode::kStaged && peer_path_group(local, members)) {
    const PeerMoeCall peer = peer_call(call, out_bytes);
    if (peer_moe_fits(*local, peer)) {
      count_call(/*peer=*/true);
      cudaError_t err = run_peer_moe(*local, members, rank, peer, stream);
      return to_ffi(err == cudaSuccess ? Status::Ok() : cuda_error(err, "enqueueing a peer MoE op"));
    }
    if (mode == PathMode::kPeer) {
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                        "jaccl: JACCL_CUDA_PATH=peer but this MoE op's rows (" +
                        std::to_string(peer.send_capacity * peer.row_bytes >> 20) +
                        " MiB) do not fit the staging area: raise JACCL_CUDA_BUFFER_MB");
    }
  } else if (mode == PathMode::kPeer) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaccl: JACCL_CUDA_PATH=peer but this MoE op's group cannot take the peer path");
  }
  count_call(/*peer=*/false);
  return staged_moe(ordinal, stream, call, out_bytes);
}

// Fills what both ops share; `inputs` gets the rows and the four lists.
ffi::Error describe(int32_t ordinal, CollectiveKind kind, ffi::Span<const int64_t> groups,
                    int64_t group_size, int64_t site, const ffi::AnyBuffer& rows,
                    const Ints* const lists[4],
                    ffi::AnyBuffer& out, JacclHostMoeCall* call) {
  int64_t device;
  if (Status s = global_device(ordinal, &device); s.failure()) return to_ffi(s);
  Dtype dtype;  // FP8 rows as bytes (combine refuses them in check_shapes)
  if (!row_dtype_of_xla(rows.element_type(), &dtype)) {
    return ffi::Error::InvalidArgument("jaccl: unsupported MoE row type on CUDA");
  }
  *call = JacclHostMoeCall{};
  call->kind = static_cast<int32_t>(kind);
  call->device = device;
  call->groups = groups.begin();
  call->groups_len = groups.size();
  call->group_size = group_size;
  call->site = site_of_attribute(site);  // GPU calls are stream-ordered: lane 0
  call->dtype = static_cast<int32_t>(dtype);
  call->rows = rows.untyped_data();
  call->rows_count = leading(rows);
  call->row_elems = trailing(rows);
  for (int i = 0; i < 4; ++i) {
    call->lists[i] = lists[i]->typed_data();
    call->list_counts[i] = lists[i]->element_count();
  }
  call->out = out.untyped_data();
  call->out_rows = leading(out);
  call->out_count = out.element_count();
  return ffi::Error::Success();
}

ffi::Error Exchange(cudaStream_t stream, int32_t ordinal, OrderIn, ffi::AnyBuffer src,
                    Ints send_rows, Ints send_offsets, Ints recv_rows, Ints recv_offsets,
                    Ints topk_idx, OrderOut, ffi::Result<ffi::AnyBuffer> dst,
                    ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                    int64_t num_experts) {
  const Ints* lists[4] = {&send_rows, &send_offsets, &recv_rows, &recv_offsets};
  JacclHostMoeCall call;
  if (ffi::Error e = describe(ordinal, CollectiveKind::kMoeDispatch, groups, group_size, site, src,
                              lists, *dst, &call);
      e.failure()) {
    return e;
  }
  call.topk_idx = topk_idx.typed_data();
  call.topk_count = topk_idx.element_count();
  call.num_experts = num_experts;
  return run(ordinal, stream, call, groups, dst->size_bytes());
}

ffi::Error Combine(cudaStream_t stream, int32_t ordinal, OrderIn, ffi::AnyBuffer y,
                   Ints send_rows, Ints send_offsets, Ints recv_pairs, Ints recv_offsets,
                   ffi::AnyBuffer weights_or_dout, OrderOut,
                   ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                   int64_t group_size, int64_t site, int64_t topk, int64_t pair_dot) {
  const Ints* lists[4] = {&send_rows, &send_offsets, &recv_pairs, &recv_offsets};
  JacclHostMoeCall call;
  if (ffi::Error e = describe(ordinal, CollectiveKind::kMoeCombine, groups, group_size, site, y,
                              lists, *out, &call);
      e.failure()) {
    return e;
  }
  bool ok;
  call.extra = weights_or_dout.untyped_data();
  call.extra_count = weights_or_dout.element_count();
  call.extra_dtype = static_cast<int32_t>(dtype_of(weights_or_dout.element_type(), &ok));
  if (!ok) return invalid("moe_combine: unsupported weights/dout type on CUDA");
  call.topk = topk;
  call.pair_dot = static_cast<int32_t>(pair_dot);
  return run(ordinal, stream, call, groups, out->size_bytes());
}

}  // namespace

void set_moe_engine(JacclRunHostMoe run) { moe_engine = run; }

}  // namespace jaccl::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_moe_exchange, jaccl::cuda::Exchange,
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
                                  .Attr<int64_t>("topk")
                                  .Attr<int64_t>("pair_dot"));
