// XLA FFI handlers for the collectives on CUDA devices: the staged path. Device buffers are
// copied into pinned host memory on XLA's stream, a host function enqueued on the same stream
// runs the CPU engine on them (the engine _jaccl owns, through engine_api.h), and the result
// is copied back: stream-ordered, with no host synchronisation in the handler. Peers anywhere
// (this host or others) are reached by the CPU transports.
//
// Contract: registered for platform CUDA with the same names and attributes as the CPU
// handlers; never marked command-buffer compatible (the host function would not replay). An
// error inside the host function cannot fail the XLA call that enqueued it: it is posted on
// the abort board (peers stop) and returned by this device's next jaccl call.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/kinds.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "handlers/cuda_handlers.h"
#include "handlers/engine_api.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaccl::cuda {
namespace {

JacclRunHostCall engine = nullptr;
std::mutex mutex;  // guards the maps below
std::unordered_map<int, int64_t> global_ids;  // CUDA ordinal -> XLA global device id
std::unordered_map<int, std::string> pending_errors;

// Pinned staging memory of one device, grown (after draining the stream) when too small.
struct Staging {
  void* host = nullptr;
  size_t bytes = 0;
};
std::unordered_map<int, Staging> staging;

struct Job {
  JacclHostCall call;
  std::vector<int64_t> groups;
  int ordinal;
};

void CUDART_CB run_job(void* data) {
  std::unique_ptr<Job> job(static_cast<Job*>(data));
  job->call.groups = job->groups.data();
  char error[2048];
  if (engine(&job->call, error, sizeof error) != 0) {
    std::lock_guard<std::mutex> lock(mutex);
    pending_errors.emplace(job->ordinal, error);
  }
}

ffi::Error cuda_error(cudaError_t err, const char* what) {
  return ffi::Error(ffi::ErrorCode::kInternal,
                    std::string("jaccl: ") + what + ": " + cudaGetErrorString(err));
}

Dtype dtype_of(ffi::DataType type, bool* ok) {
  *ok = true;
  switch (type) {
    case ffi::DataType::PRED: return Dtype::kBool;
    case ffi::DataType::S8: return Dtype::kI8;
    case ffi::DataType::S16: return Dtype::kI16;
    case ffi::DataType::S32: return Dtype::kI32;
    case ffi::DataType::S64: return Dtype::kI64;
    case ffi::DataType::U8: return Dtype::kU8;
    case ffi::DataType::U16: return Dtype::kU16;
    case ffi::DataType::U32: return Dtype::kU32;
    case ffi::DataType::U64: return Dtype::kU64;
    case ffi::DataType::F16: return Dtype::kF16;
    case ffi::DataType::BF16: return Dtype::kBF16;
    case ffi::DataType::F32: return Dtype::kF32;
    case ffi::DataType::F64: return Dtype::kF64;
    default: *ok = false; return Dtype::kF32;
  }
}

ffi::Error staged(CollectiveKind kind, cudaStream_t stream, int32_t ordinal, ffi::AnyBuffer in,
                  ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                  int64_t group_size, int64_t op, int64_t algorithm, int64_t outer_in,
                  int64_t outer_out) {
  if (engine == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaccl: the CUDA handlers have no engine (import jax_jaccl first)");
  }
  bool ok;
  const Dtype dtype = dtype_of(in.element_type(), &ok);
  if (!ok) return ffi::Error::InvalidArgument("jaccl: unsupported element type on CUDA");
  int64_t device;
  Staging* stage;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto error = pending_errors.find(ordinal);
    if (error != pending_errors.end()) {
      return ffi::Error(ffi::ErrorCode::kUnavailable, "jaccl: an earlier collective on this GPU "
                        "failed: " + error->second);
    }
    auto id = global_ids.find(ordinal);
    if (id == global_ids.end()) {
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                        "jaccl: CUDA device " + std::to_string(ordinal) + " is not in the jaccl world");
    }
    device = id->second;
    stage = &staging[ordinal];
  }
  const size_t in_bytes = in.size_bytes(), out_bytes = out->size_bytes();
  const size_t need = in_bytes + out_bytes;
  if (stage->bytes < need) {
    cudaError_t err = cudaStreamSynchronize(stream);  // the old buffer may still be in use
    if (err == cudaSuccess && stage->host != nullptr) err = cudaFreeHost(stage->host);
    stage->host = nullptr;
    stage->bytes = 0;
    if (err == cudaSuccess) err = cudaHostAlloc(&stage->host, need, cudaHostAllocPortable);
    if (err != cudaSuccess) return cuda_error(err, "pinned staging memory");
    stage->bytes = need;
  }
  char* host_in = static_cast<char*>(stage->host);
  char* host_out = host_in + in_bytes;
  cudaError_t err = cudaMemcpyAsync(host_in, in.untyped_data(), in_bytes, cudaMemcpyDeviceToHost, stream);
  auto job = std::make_unique<Job>();
  job->groups.assign(groups.begin(), groups.end());
  job->ordinal = ordinal;
  job->call = JacclHostCall{static_cast<int32_t>(kind), device, nullptr, job->groups.size(),
                            group_size, static_cast<int32_t>(dtype), static_cast<int32_t>(op),
                            static_cast<int32_t>(algorithm), host_in, host_out,
                            in.element_count(), out->element_count(),
                            static_cast<uint64_t>(outer_in), static_cast<uint64_t>(outer_out)};
  if (err == cudaSuccess) err = cudaLaunchHostFunc(stream, run_job, job.get());
  if (err != cudaSuccess) return cuda_error(err, "enqueueing a staged collective");
  job.release();  // run_job owns it now
  err = cudaMemcpyAsync(out->untyped_data(), host_out, out_bytes, cudaMemcpyHostToDevice, stream);
  if (err != cudaSuccess) return cuda_error(err, "copying a collective's result back");
  return ffi::Error::Success();
}

ffi::Error AllReduce(cudaStream_t s, int32_t d, ffi::Token, ffi::AnyBuffer x, ffi::Result<ffi::Token>,
                     ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                     int64_t group_size, int64_t op, int64_t algorithm) {
  return staged(CollectiveKind::kAllReduce, s, d, x, out, groups, group_size, op, algorithm, 1, 1);
}

ffi::Error ReduceScatter(cudaStream_t s, int32_t d, ffi::Token, ffi::AnyBuffer x,
                         ffi::Result<ffi::Token>, ffi::Result<ffi::AnyBuffer> out,
                         ffi::Span<const int64_t> groups, int64_t group_size, int64_t op,
                         int64_t algorithm, int64_t outer) {
  return staged(CollectiveKind::kReduceScatter, s, d, x, out, groups, group_size, op, algorithm,
                outer, 1);
}

ffi::Error AllGather(cudaStream_t s, int32_t d, ffi::Token, ffi::AnyBuffer x, ffi::Result<ffi::Token>,
                     ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                     int64_t group_size, int64_t algorithm, int64_t outer) {
  return staged(CollectiveKind::kAllGather, s, d, x, out, groups, group_size,
                static_cast<int64_t>(ReduceOp::kSum), algorithm, 1, outer);
}

ffi::Error AllToAll(cudaStream_t s, int32_t d, ffi::Token, ffi::AnyBuffer x, ffi::Result<ffi::Token>,
                    ffi::Result<ffi::AnyBuffer> out, ffi::Span<const int64_t> groups,
                    int64_t group_size, int64_t outer_in, int64_t outer_out) {
  return staged(CollectiveKind::kAllToAll, s, d, x, out, groups, group_size,
                static_cast<int64_t>(ReduceOp::kSum), 0, outer_in, outer_out);
}

}  // namespace

void set_engine(JacclRunHostCall run) { engine = run; }

void set_device_ids(const std::vector<std::pair<int, int64_t>>& ids) {
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [ordinal, id] : ids) global_ids[ordinal] = id;
}

}  // namespace jaccl::cuda

#define JACCL_CUDA_BINDING                                     \
  ffi::Ffi::Bind()                                             \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()                \
      .Ctx<ffi::DeviceOrdinal>()                               \
      .Arg<ffi::Token>()                                       \
      .Arg<ffi::AnyBuffer>()                                   \
      .Ret<ffi::Token>()                                       \
      .Ret<ffi::AnyBuffer>()                                   \
      .Attr<ffi::Span<const int64_t>>("groups")                \
      .Attr<int64_t>("group_size")

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
