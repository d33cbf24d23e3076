// The CUDA kernels, reachable only through these launchers (host code never sees a kernel).
//
// Contract: every launcher enqueues work on `stream` and returns the launch error, never
// blocks the host. Pointers are device pointers (or peer pointers the device can read).
// Reductions follow the CPU engine's rules exactly: operands combined in the order given,
// float16/bfloat16 in float32 (float16 rounded after every step), integer sums wrapping,
// max/min skipping a NaN operand (common/reduce_apply.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/reduce.h"

namespace jaccl::cuda {

constexpr int kMaxOperands = 16;

// dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i < count, 16-byte vectorised when every
// pointer is 16-byte aligned.
cudaError_t launch_reduce(ReduceOp op, Dtype dtype, void* dst, const void* const* srcs, int n,
                          size_t count, cudaStream_t stream);

// out[t] = sum over k ascending of weights[t*topk+k] * rows[t*topk+k][0..hidden) (rows[p] may be
// null: skipped), accumulated in float32; dtype float32, bfloat16 or float16. `rows` is a
// device array of tokens*topk device pointers.
cudaError_t launch_moe_combine(Dtype dtype, void* out, const void* const* rows, const float* weights,
                               size_t tokens, size_t topk, size_t hidden, cudaStream_t stream);

// dst row i = src row rows[i] for i < n (rows: device int32 array), `row_bytes` per row.
cudaError_t launch_gather_rows(void* dst, const void* src, const int32_t* rows, size_t n,
                               size_t row_bytes, cudaStream_t stream);

// A word in mapped host memory that a host thread publishes to the stream: (number of the
// last finished job << 1) | 1 once any job failed, written in one store.
struct HostSignal {
  volatile uint64_t done;
};

// The stream waits (one thread polling `signal`, device view of mapped memory) until job
// `number` finished, then traps if a job failed.
cudaError_t launch_wait_host(HostSignal* signal, uint64_t number, cudaStream_t stream);

}  // namespace jaccl::cuda
