// XLA FFI handlers for the collectives on CUDA devices. Two paths, chosen per group the same
// way on every rank:
// - the peer path (cuda/peer_collectives.h): every member is a GPU of this host whose workspace this
//   process mapped (CUDA IPC or peer access); kernels and copies on XLA's stream, barriers by
//   flags in device memory, no host involvement;
// - the staged path: device buffers are copied into pinned host memory on XLA's stream, a
//   host function enqueued on the same stream runs the CPU engine on them (the engine _jaccl
//   owns, through handlers/host_abi.h), and the result is copied back. Peers anywhere (this host or
//   others) are reached by the CPU transports.
// JACCL_CUDA_PATH=auto (default) | peer | staged overrides the choice (same on every process).
//
// Contract: registered for platform CUDA with the same names and attributes as the CPU
// handlers; never marked command-buffer compatible (barrier counts are taken at enqueue time
// and the staged host function would not replay). A failure that happens on the stream
// cannot fail the XLA call that enqueued it: the peer path's barrier traps (the context
// stops, so nothing consumes a wrong result) and leaves the reason in the device status; the
// staged path posts it on the abort board (peers stop). Either is returned by this device's
// next jaccl call and printed on stderr.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "collectives/kinds.h"
#include "comm/lanes.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "common/log.h"
#include "common/text.h"
#include "handlers/order_operand.h"
#include "handlers/cuda/symbols.h"
#include "cuda/peer_collectives.h"
#include "cuda/staging.h"
#include "handlers/ffi_status.h"
#include "handlers/xla_dtype.h"
#include "handlers/host_abi.h"
#include "handlers/buffer_shape.h"
#include "handlers/ragged_indices.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl::cuda {
namespace {

JacclRunHostCall engine = nullptr;

// The element counts each collective needs: the peer path divides by them unchecked.
bool shapes_agree(CollectiveKind kind, size_t in, size_t out, size_t n, size_t outer_in,
                  size_t outer_out) {
  if (outer_in == 0 || outer_out == 0) return false;
  switch (kind) {
    case CollectiveKind::kAllReduce: return in == out;
    case CollectiveKind::kReduceScatter: return in == out * n && in % (outer_in * n) == 0;
    case CollectiveKind::kAllGather: return out == in * n && out % (outer_out * n) == 0;
    case CollectiveKind::kAllToAll:
      return in == out && in % (outer_in * n) == 0 && out % (outer_out * n) == 0;
    case CollectiveKind::kPermute: return in == out;
    default: return false;
  }
}

void log_path(CollectiveKind kind, size_t bytes, int64_t device, size_t n, const char* path) {
  if (log_level() < LogLevel::kInfo) return;
  const int size_class = jaccl::size_class(bytes);
  if (!first_time(text("cuda/", static_cast<int>(kind), "/", size_class, "/", device, "/", path))) {
    return;
  }
  log(LogLevel::kInfo, kind_name(kind), " ", bytes, " B (<= 2^", size_class, ") on GPU device ",
      device, ", group of ", n, ": ", path);
}

// Device buffers -> pinned host memory -> the CPU engine (on the device's worker thread) ->
// back, all ordered on the stream.
ffi::Error staged(const JacclHostCall& call, std::vector<int64_t> groups, int32_t ordinal,
                  cudaStream_t stream, ffi::AnyBuffer in, ffi::Result<ffi::AnyBuffer> out,
                  std::vector<int64_t> perm = {}) {
  if (engine == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaccl: the CUDA handlers have no engine (import jax_jaccl first)");
  }
  const size_t in_bytes = in.size_bytes(), out_bytes = out->size_bytes();
  const size_t out_offset = (in_bytes + 255) / 256 * 256;
  StagedCall staging;
  Status result = StagedCall::begin(ordinal, stream, out_offset + out_bytes, &staging);
  if (result.success()) {
    char* host_in = staging.host();
    char* host_out = host_in + out_offset;
    cudaError_t err = cudaMemcpyAsync(host_in, in.untyped_data(), in_bytes, cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) {
      result = cuda_error(err, "staging a collective's input");
    } else {
      JacclHostCall host = call;
      host.in = host_in;
      host.out = host_out;
      result = staging.enqueue([host, groups = std::move(groups), perm = std::move(perm)](
                                   char* error, size_t len) mutable {
        host.groups = groups.data();
        host.groups_len = groups.size();
        host.perm = perm.data();
        host.perm_len = perm.size();
        return engine(&host, error, len);
      });
    }
    if (result.success()) {
      err = cudaMemcpyAsync(out->untyped_data(), host_out, out_bytes, cudaMemcpyHostToDevice, stream);
      if (err != cudaSuccess) result = cuda_error(err, "copying a collective's result back");
    }
  }
  if (result.failure()) raise_abort(result.message());  // the peers' engine jobs stop too
  return to_ffi(result);
}

// The rank whose input `rank` receives in the permutation `perm` ((source, dest) pairs), -1
// for none; false if a pair names a rank outside a group of n.
bool permutation_source(const std::vector<int64_t>& perm, int rank, size_t n, int* source) {
  *source = -1;
  if (perm.size() % 2) return false;
  for (size_t i = 0; i < perm.size(); i += 2) {
    if (perm[i] < 0 || perm[i + 1] < 0 || perm[i] >= static_cast<int64_t>(n) ||
        perm[i + 1] >= static_cast<int64_t>(n)) {
      return false;
    }
    if (perm[i + 1] == rank) *source = static_cast<int>(perm[i]);
  }
  return true;
}

ffi::Error collective(CollectiveKind kind, cudaStream_t stream, int32_t ordinal, ffi::AnyBuffer in,
                      ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                      int64_t group_size, int64_t site, int64_t op, int64_t algorithm,
                      int64_t outer_in, int64_t outer_out, std::vector<int64_t> perm = {}) {
  bool ok;
  const Dtype dtype = dtype_of(in.element_type(), &ok);
  if (!ok) return ffi::Error::InvalidArgument("jaccl: unsupported element type on CUDA");
  int64_t device;
  if (Status s = global_device(ordinal, &device); s.failure()) return to_ffi(s);
  if (std::string why = pending_error(ordinal); !why.empty()) {
    return ffi::Error(ffi::ErrorCode::kUnavailable,
                      "jaccl: an earlier collective on this GPU failed: " + why);
  }
  LocalDevice* local = local_device(ordinal);
  if (local != nullptr) {
    const std::string why = failure(*local);
    if (!why.empty()) return ffi::Error(ffi::ErrorCode::kUnavailable, why);
  }
  int rank = 0;
  const std::vector<int64_t> members = group_members(groups.begin(), groups.size(), group_size, device, &rank);
  if (members.empty()) {
    return ffi::Error::InvalidArgument("jaccl: device " + std::to_string(device) +
                                       " is in none of the call's groups");
  }
  const size_t bytes = std::max(in.size_bytes(), out->size_bytes());
  if (!shapes_agree(kind, in.element_count(), out->element_count(), members.size(),
                    static_cast<size_t>(outer_in), static_cast<size_t>(outer_out))) {
    return ffi::Error::InvalidArgument(std::string("jaccl: ") + kind_name(kind) + " of " +
                                       std::to_string(in.element_count()) + " -> " +
                                       std::to_string(out->element_count()) +
                                       " elements does not split over a group of " +
                                       std::to_string(members.size()));
  }
  int source = rank;  // ppermute: whose input this rank gets
  if (kind == CollectiveKind::kPermute && !permutation_source(perm, rank, members.size(), &source)) {
    return ffi::Error::InvalidArgument("jaccl: ppermute pairs outside a group of " +
                                       std::to_string(members.size()));
  }
  if (members.size() == 1) {
    if (source < 0) {
      cudaError_t err = cudaMemsetAsync(out->untyped_data(), 0, out->size_bytes(), stream);
      return to_ffi(err == cudaSuccess ? Status::Ok() : cuda_error(err, "zeroing a ppermute result"));
    }
    if (out->untyped_data() == in.untyped_data() || in.size_bytes() == 0) return ffi::Error::Success();
    cudaError_t err = cudaMemcpyAsync(out->untyped_data(), in.untyped_data(), in.size_bytes(),
                                      cudaMemcpyDeviceToDevice, stream);
    return to_ffi(err == cudaSuccess ? Status::Ok() : cuda_error(err, "copying a group of one"));
  }
  const PathMode mode = path_mode();
  if (mode != PathMode::kStaged && peer_path_group(local, members)) {
    PeerCollective call;
    call.kind = kind;
    call.site = site_of_attribute(site);  // GPU calls are stream-ordered: lane 0
    call.dtype = dtype;
    call.op = static_cast<ReduceOp>(op);
    call.algorithm = static_cast<Algorithm>(algorithm);
    call.in = in.untyped_data();
    call.out = out->untyped_data();
    call.in_count = in.element_count();
    call.out_count = out->element_count();
    call.outer_in = static_cast<size_t>(outer_in);
    call.outer_out = static_cast<size_t>(outer_out);
    call.receive_from = source;
    const bool one_shot = kind == CollectiveKind::kAllReduce &&
        peer_all_reduce_algorithm(call.algorithm, bytes) == Algorithm::kNaive;
    log_path(kind, bytes, device, members.size(),
             kind != CollectiveKind::kAllReduce ? "peer path" : one_shot ? "peer path, one-shot"
                                                                          : "peer path, two-shot");
    count_call(/*peer=*/true);
    cudaError_t err = run_peer_collective(*local, members, rank, call, stream);
    return to_ffi(err == cudaSuccess ? Status::Ok() : cuda_error(err, "enqueueing a peer collective"));
  }
  if (mode == PathMode::kPeer) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaccl: JACCL_CUDA_PATH=peer but the group of device " + std::to_string(device) +
                      " cannot take the peer path (it needs every member on this host, mapped "
                      "both ways, at most " + std::to_string(kMaxPeers) + " members)");
  }
  log_path(kind, bytes, device, members.size(), "staged through host memory");
  count_call(/*peer=*/false);
  JacclHostCall call{static_cast<int32_t>(kind), device, nullptr, 0, group_size,
                     static_cast<int32_t>(dtype), static_cast<int32_t>(op),
                     static_cast<int32_t>(algorithm), nullptr, nullptr, in.element_count(),
                     out->element_count(), static_cast<uint64_t>(outer_in),
                     static_cast<uint64_t>(outer_out)};
  call.site = site_of_attribute(site);  // GPU calls are stream-ordered: lane 0
  return staged(call, std::vector<int64_t>(groups.begin(), groups.end()), ordinal, stream, in, out,
                std::move(perm));
}

ffi::Error AllReduce(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x, OrderOut,
                     ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                     int64_t group_size, int64_t site, int64_t op, int64_t algorithm) {
  return collective(CollectiveKind::kAllReduce, s, d, x, out, groups, group_size, site, op,
                    algorithm, 1, 1);
}

ffi::Error ReduceScatter(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x,
                         OrderOut, ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                         int64_t op, int64_t algorithm, int64_t outer) {
  return collective(CollectiveKind::kReduceScatter, s, d, x, out, groups, group_size, site, op,
                    algorithm, outer, 1);
}

ffi::Error AllGather(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x, OrderOut,
                     ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                     int64_t group_size, int64_t site, int64_t algorithm, int64_t outer) {
  return collective(CollectiveKind::kAllGather, s, d, x, out, groups, group_size, site,
                static_cast<int64_t>(ReduceOp::kSum), algorithm, 1, outer);
}

ffi::Error AllToAll(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x, OrderOut,
                    ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                    int64_t group_size, int64_t site, int64_t outer_in, int64_t outer_out) {
  return collective(CollectiveKind::kAllToAll, s, d, x, out, groups, group_size, site,
                static_cast<int64_t>(ReduceOp::kSum), 0, outer_in, outer_out);
}

ffi::Error Permute(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x, OrderOut,
                   ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                   int64_t group_size, int64_t site, ffi::Span<const int64_t> perm) {
  return collective(CollectiveKind::kPermute, s, d, x, out, groups, group_size, site,
                    static_cast<int64_t>(ReduceOp::kSum), 0, 1, 1,
                    std::vector<int64_t>(perm.begin(), perm.end()));
}

// ragged_all_to_all, staged: operand, output and the four index arrays go to pinned host
// memory on the stream; the host job widens the indices and runs the engine on the copies;
// the result goes back into the output (which XLA aliases to it). No peer path yet.
ffi::Error RaggedAllToAll(cudaStream_t stream, int32_t ordinal, OrderIn, ffi::AnyBuffer operand,
                          ffi::AnyBuffer output, ffi::AnyBuffer input_offsets,
                          ffi::AnyBuffer send_sizes, ffi::AnyBuffer output_offsets,
                          ffi::AnyBuffer recv_sizes, OrderOut, ffi::Result<ffi::AnyBuffer> out,
                          ffi::Span<const int64_t> groups, int64_t group_size, int64_t site) {
  if (engine == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaccl: the CUDA handlers have no engine (import jax_jaccl first)");
  }
  bool ok;
  const Dtype dtype = dtype_of(operand.element_type(), &ok);
  if (!ok || output.element_type() != operand.element_type()) {
    return ffi::Error::InvalidArgument("jaccl: unsupported ragged_all_to_all element type on CUDA");
  }
  const ffi::AnyBuffer* indices[4] = {&input_offsets, &send_sizes, &output_offsets, &recv_sizes};
  const size_t entries = input_offsets.element_count();
  for (const ffi::AnyBuffer* b : indices) {
    if (b->element_count() != entries || (b->element_type() != ffi::DataType::S32 &&
                                          b->element_type() != ffi::DataType::S64)) {
      return ffi::Error::InvalidArgument("jaccl: ragged_all_to_all index arrays must be int32 or "
                                         "int64 with the same number of entries");
    }
  }
  int64_t device;
  if (Status s = global_device(ordinal, &device); s.failure()) return to_ffi(s);
  if (std::string why = pending_error(ordinal); !why.empty()) {
    return ffi::Error(ffi::ErrorCode::kUnavailable,
                      "jaccl: an earlier collective on this GPU failed: " + why);
  }
  if (path_mode() == PathMode::kPeer) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaccl: JACCL_CUDA_PATH=peer, but ragged_all_to_all has no peer path "
                      "(it is staged through host memory)");
  }
  log_path(CollectiveKind::kRaggedAllToAll, operand.size_bytes(), device,
           static_cast<size_t>(group_size), "staged through host memory");
  count_call(/*peer=*/false);
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  size_t at = 0;
  const size_t operand_at = at;
  at += aligned(operand.size_bytes());
  const size_t output_at = at;
  at += aligned(output.size_bytes());
  size_t index_at[4];
  for (int i = 0; i < 4; ++i) {
    index_at[i] = at;
    at += aligned(indices[i]->size_bytes());
  }
  StagedCall staging;
  Status result = StagedCall::begin(ordinal, stream, at, &staging);
  auto to_host = [&](size_t offset, const ffi::AnyBuffer& b, const char* what) {
    if (result.failure() || b.size_bytes() == 0) return;
    cudaError_t err = cudaMemcpyAsync(staging.host() + offset, b.untyped_data(), b.size_bytes(),
                                      cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) result = cuda_error(err, what);
  };
  to_host(operand_at, operand, "staging ragged_all_to_all's operand");
  to_host(output_at, output, "staging ragged_all_to_all's output");
  for (int i = 0; i < 4; ++i) to_host(index_at[i], *indices[i], "staging ragged_all_to_all's indices");
  char* host = result.success() ? staging.host() : nullptr;
  if (result.success()) {
    JacclHostCall call{static_cast<int32_t>(CollectiveKind::kRaggedAllToAll), device, nullptr, 0,
                       group_size, static_cast<int32_t>(dtype), 0, 0, host + operand_at,
                       host + output_at, operand.element_count(), output.element_count(), 1, 1};
    call.site = site_of_attribute(site);  // GPU calls are stream-ordered: lane 0
    call.in_rows = leading(operand);
    call.out_rows = leading(output);
    call.row_elems = trailing(operand);
    const ffi::DataType types[4] = {input_offsets.element_type(), send_sizes.element_type(),
                                    output_offsets.element_type(), recv_sizes.element_type()};
    result = staging.enqueue([call, host, index_at, types, entries,
                              groups = std::vector<int64_t>(groups.begin(), groups.end())](
                                 char* error, size_t len) mutable {
      std::vector<int64_t> widened[4];
      for (int i = 0; i < 4; ++i) {
        widen_indices(host + index_at[i], types[i], entries, &widened[i]);
        call.ragged[i] = widened[i].data();
      }
      call.ragged_len = entries;
      call.groups = groups.data();
      call.groups_len = groups.size();
      return engine(&call, error, len);
    });
  }
  if (result.success() && out->size_bytes() > 0) {
    cudaError_t err = cudaMemcpyAsync(out->untyped_data(), host + output_at, out->size_bytes(),
                                      cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) result = cuda_error(err, "copying ragged_all_to_all's result back");
  }
  if (result.failure()) raise_abort(result.message());
  return to_ffi(result);
}

}  // namespace

void set_engine(JacclRunHostCall run) { engine = run; }

}  // namespace jaccl::cuda

#define JACCL_CUDA_BINDING                                     \
  ffi::Ffi::Bind()                                             \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()                \
      .Ctx<ffi::DeviceOrdinal>()                               \
      .Arg<ffi::AnyBuffer>()                                       \
      .Arg<ffi::AnyBuffer>()                                   \
      .Ret<ffi::AnyBuffer>()                                       \
      .Ret<ffi::AnyBuffer>()                                   \
      .Attr<ffi::Span<const int64_t>>("groups")                \
      .Attr<int64_t>("group_size")                             \
      .Attr<int64_t>("site")

XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_all_reduce, jaccl::cuda::AllReduce,
                              JACCL_CUDA_BINDING.Attr<int64_t>("op").Attr<int64_t>("algorithm"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_reduce_scatter, jaccl::cuda::ReduceScatter,
                              JACCL_CUDA_BINDING.Attr<int64_t>("op")
                                  .Attr<int64_t>("algorithm")
                                  .Attr<int64_t>("outer"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_all_gather, jaccl::cuda::AllGather,
                              JACCL_CUDA_BINDING.Attr<int64_t>("algorithm").Attr<int64_t>("outer"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_all_to_all, jaccl::cuda::AllToAll,
                              JACCL_CUDA_BINDING.Attr<int64_t>("outer_in").Attr<int64_t>("outer_out"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_ppermute, jaccl::cuda::Permute,
                              JACCL_CUDA_BINDING.Attr<ffi::Span<const int64_t>>("perm"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(jaccl_cuda_ragged_all_to_all, jaccl::cuda::RaggedAllToAll,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // order
                                  .Arg<ffi::AnyBuffer>()  // operand
                                  .Arg<ffi::AnyBuffer>()  // output (aliased to the result)
                                  .Arg<ffi::AnyBuffer>()  // input_offsets
                                  .Arg<ffi::AnyBuffer>()  // send_sizes
                                  .Arg<ffi::AnyBuffer>()  // output_offsets
                                  .Arg<ffi::AnyBuffer>()  // recv_sizes
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<ffi::Span<const int64_t>>("groups")
                                  .Attr<int64_t>("group_size")
                                  .Attr<int64_t>("site"));
