// Kernel timings for `jaccl-bench kernels` (jax_jaccl/bench/kernels.py).
//
// Contract: each function runs one kernel of cuda/kernels.h or cuda/moe_peer_kernels.h on
// device memory the caller owns (addresses of JAX arrays on the current device, all of their
// producers finished), once, then `iters` more times between two CUDA events on the legacy
// default stream, and waits for the device. It returns seconds per call, or 0 when `iters` is
// 0: the single run leaves its result in place for the caller to check. copy() times a device
// copy of `bytes` between buffers of its own. Failures throw std::runtime_error with CUDA's
// message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace jaccl::cuda::bench {

double copy(size_t bytes, int iters);

// dst = op(srcs...) over `count` elements of `dtype` (a Dtype code).
double reduce(int dtype, int op, const std::vector<uint64_t>& srcs, uint64_t dst, size_t count,
              int iters);

// out = sum over k of weights[t, k] * rows[t * topk + k] (row addresses, 0 for none).
double combine(int dtype, uint64_t out, const std::vector<uint64_t>& rows, uint64_t weights,
               size_t tokens, size_t topk, size_t hidden, int iters);

// dst row i = src row rows[i] (rows: an int32 device array of n entries).
double gather(uint64_t dst, uint64_t src, uint64_t rows, size_t n, size_t row_bytes, int iters);

// The dispatch's packing: staging row j = src row rows[j] for j < offsets[groups] (int32
// device arrays), at most `capacity` rows.
double pack(uint64_t staging, uint64_t src, size_t src_rows, uint64_t rows, uint64_t offsets,
            int groups, size_t capacity, size_t row_bytes, int iters);

}  // namespace jaccl::cuda::bench
