// XLA FFI handlers for the collectives on CUDA devices: XLA's buffers and attributes in, a
// request (collectives/request.h) run on the peer path or staged through host memory
// (cuda/collective_paths.h), an ffi::Error out.
//
// Contract: registered for platform CUDA with the same names and attributes as the CPU
// handlers; never marked command-buffer compatible (barrier counts are taken at enqueue time
// and the staged host function would not replay). A failure on the stream is returned by this
// device's next jaccl call (cuda/collective_paths.h). The staged path runs the CPU engine that
// _jaccl owns through abi/host_abi.h (set_engine).
#include <cuda_runtime.h>

#include <cstdint>

#include "abi/host_abi.h"
#include "cuda/collective_paths.h"
#include "cuda/staging.h"
#include "handlers/cuda/symbols.h"
#include "handlers/ffi_status.h"
#include "handlers/order_operand.h"
#include "handlers/ragged_indices.h"
#include "handlers/xla_dtype.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl::cuda {
namespace {

JacclRunHostCall engine = nullptr;

int run_on_host(const CollectiveRequest& request, char* error, size_t error_len) {
  return engine(&request, error, error_len);
}

// The request of a collective of `in` into `out`. GPU calls are stream-ordered: every handler
// runs its call in lane 0, whatever its `lane` attribute, so the engine derives the id of that
// lane's communicator (the `comm` attribute names the chain's lane's).
bool request(CollectiveKind kind, ffi::Span<const int64_t> groups, int64_t group_size,
             int64_t site, const ffi::AnyBuffer& in, ffi::Result<ffi::AnyBuffer>& out,
             CollectiveRequest* r) {
  r->address.kind = kind;
  r->address.groups = groups.begin();
  r->address.groups_len = groups.size();
  r->address.group_size = group_size;
  r->address.site = static_cast<uint32_t>(site);
  r->in = in.untyped_data();
  r->out = out->untyped_data();
  r->in_count = in.element_count();
  r->out_count = out->element_count();
  return dtype_of_xla(in.element_type(), &r->address.dtype) &&
         out->element_type() == in.element_type();
}

ffi::Error run(const CollectiveRequest& r, bool known_type, cudaStream_t stream, int32_t ordinal) {
  if (!known_type) return ffi::Error::InvalidArgument("jaccl: unsupported element type on CUDA");
  return to_ffi(run_on_gpu(r, ordinal, stream, engine == nullptr ? nullptr : run_on_host));
}

ffi::Error AllReduce(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x, OrderOut,
                     ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                     int64_t group_size, int64_t site, int64_t /*lane*/, int64_t /*comm*/,
                     int64_t op, int64_t algorithm) {
  CollectiveRequest r;
  const bool ok = request(CollectiveKind::kAllReduce, groups, group_size, site, x, out, &r);
  r.op = static_cast<ReduceOp>(op);
  r.algorithm = static_cast<Algorithm>(algorithm);
  return run(r, ok, s, d);
}

ffi::Error ReduceScatter(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x,
                         OrderOut, ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                         int64_t /*lane*/, int64_t /*comm*/, int64_t op, int64_t algorithm,
                         int64_t outer) {
  CollectiveRequest r;
  const bool ok = request(CollectiveKind::kReduceScatter, groups, group_size, site, x, out, &r);
  r.op = static_cast<ReduceOp>(op);
  r.algorithm = static_cast<Algorithm>(algorithm);
  r.outer_in = static_cast<size_t>(outer);
  return run(r, ok, s, d);
}

ffi::Error AllGather(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x, OrderOut,
                     ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                     int64_t group_size, int64_t site, int64_t /*lane*/, int64_t /*comm*/,
                     int64_t algorithm, int64_t outer) {
  CollectiveRequest r;
  const bool ok = request(CollectiveKind::kAllGather, groups, group_size, site, x, out, &r);
  r.algorithm = static_cast<Algorithm>(algorithm);
  r.outer_out = static_cast<size_t>(outer);
  return run(r, ok, s, d);
}

ffi::Error AllToAll(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x, OrderOut,
                    ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                    int64_t group_size, int64_t site, int64_t /*lane*/, int64_t /*comm*/,
                    int64_t outer_in, int64_t outer_out) {
  CollectiveRequest r;
  const bool ok = request(CollectiveKind::kAllToAll, groups, group_size, site, x, out, &r);
  r.outer_in = static_cast<size_t>(outer_in);
  r.outer_out = static_cast<size_t>(outer_out);
  return run(r, ok, s, d);
}

ffi::Error Permute(cudaStream_t s, int32_t d, OrderIn, ffi::AnyBuffer x, OrderOut,
                   ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                   int64_t group_size, int64_t site, int64_t /*lane*/, int64_t /*comm*/,
                   ffi::Span<const int64_t> perm) {
  CollectiveRequest r;
  const bool ok = request(CollectiveKind::kPermute, groups, group_size, site, x, out, &r);
  r.pairs = perm.begin();
  r.pairs_len = perm.size();
  return run(r, ok, s, d);
}

// ragged_all_to_all (staged): the result starts as the output operand.
ffi::Error RaggedAllToAll(cudaStream_t stream, int32_t ordinal, OrderIn, ffi::AnyBuffer operand,
                          ffi::AnyBuffer output, ffi::AnyBuffer input_offsets,
                          ffi::AnyBuffer send_sizes, ffi::AnyBuffer output_offsets,
                          ffi::AnyBuffer recv_sizes, OrderOut, ffi::Result<ffi::AnyBuffer> out,
                          ffi::Span<const int64_t> groups, int64_t group_size, int64_t site,
                          int64_t /*lane*/, int64_t /*comm*/) {
  if (ffi::Error e = output_error(output, *out); e.failure()) return e;
  CollectiveRequest r;
  const bool ok = request(CollectiveKind::kRaggedAllToAll, groups, group_size, site, operand,
                          out, &r);
  const ffi::AnyBuffer* indices[4] = {&input_offsets, &send_sizes, &output_offsets, &recv_sizes};
  set_ragged(&r, operand, leading(output), indices);
  if (ok && out->untyped_data() != output.untyped_data() && output.size_bytes() > 0) {
    cudaError_t err = cudaMemcpyAsync(out->untyped_data(), output.untyped_data(),
                                      output.size_bytes(), cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return to_ffi(cuda_error(err, "copying ragged_all_to_all's output"));
  }
  return run(r, ok, stream, ordinal);
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
      .Attr<int64_t>("site")                                   \
      .Attr<int64_t>("lane")                                   \
      .Attr<int64_t>("comm")

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
                                  .Attr<int64_t>("site")
                                  .Attr<int64_t>("lane")
                                  .Attr<int64_t>("comm"));
