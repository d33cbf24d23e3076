// Kernel timings for `jaccl-bench kernels`: one warm-up run (whose result the caller checks),
// then CUDA events around `iters` back-to-back launches on the legacy default stream.
#include "cuda/kernel_bench.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/dtype.h"
#include "common/reduce.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/moe_peer_kernels.h"

namespace jaccl::cuda::bench {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    check(cudaMemset(p, 0, bytes), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { check(cudaEventCreate(&e), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

template <typename Launch>
double timed(int iters, const char* what, Launch&& launch) {
  check(launch(), what);
  check(cudaDeviceSynchronize(), what);
  if (iters <= 0) return 0.0;
  Event start, stop;
  check(cudaEventRecord(start.e, 0), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) check(launch(), what);
  check(cudaEventRecord(stop.e, 0), "cudaEventRecord");
  check(cudaEventSynchronize(stop.e), "cudaEventSynchronize");
  check(cudaDeviceSynchronize(), what);
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start.e, stop.e), "cudaEventElapsedTime");
  return ms / 1e3 / iters;
}

template <typename T>
T* at(uint64_t address) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(address));
}

}  // namespace

double copy(size_t bytes, int iters) {
  DeviceBuffer a(bytes), b(bytes);
  return timed(iters, "device copy", [&] { return cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, 0); });
}

double reduce(int dtype, int op, const std::vector<uint64_t>& srcs, uint64_t dst, size_t count, int iters) {
  std::vector<const void*> operands;
  for (uint64_t s : srcs) operands.push_back(at<const void>(s));
  return timed(iters, "reduce", [&] {
    return launch_reduce(static_cast<ReduceOp>(op), static_cast<Dtype>(dtype), at<void>(dst), operands.data(),
                         static_cast<int>(operands.size()), count, 0);
  });
}

double combine(int dtype, uint64_t out, const std::vector<uint64_t>& rows, uint64_t weights, size_t tokens,
               size_t topk, size_t hidden, int iters) {
  if (rows.size() != tokens * topk) throw std::runtime_error("combine: need tokens * topk row addresses");
  DeviceBuffer table(rows.size() * sizeof(void*));
  check(cudaMemcpy(table.p, rows.data(), rows.size() * sizeof(uint64_t), cudaMemcpyHostToDevice), "row table");
  return timed(iters, "combine", [&] {
    return launch_moe_combine(static_cast<Dtype>(dtype), at<void>(out), static_cast<const void* const*>(table.p),
                              at<const float>(weights), tokens, topk, hidden, 0);
  });
}

double gather(uint64_t dst, uint64_t src, uint64_t rows, size_t n, size_t row_bytes, int iters) {
  return timed(iters, "gather rows", [&] {
    return launch_gather_rows(at<void>(dst), at<const void>(src), at<const int32_t>(rows), n, row_bytes, 0);
  });
}

double pack(uint64_t staging, uint64_t src, size_t src_rows, uint64_t rows, uint64_t offsets, int groups,
            size_t capacity, size_t row_bytes, int iters) {
  return timed(iters, "pack rows", [&] {
    return launch_pack_rows(at<char>(staging), at<const char>(src), src_rows, at<const int32_t>(rows),
                            at<const int32_t>(offsets), groups, capacity, row_bytes, 0);
  });
}

}  // namespace jaccl::cuda::bench
