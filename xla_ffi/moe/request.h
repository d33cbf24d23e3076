// One MoE dispatch or combine as every caller describes it, declared once for C and C++
// (common/c_struct.h): the CPU handlers from XLA's buffers, the CUDA module's staged host jobs
// (through abi/host_abi.h), and the CUDA peer path.
//
// Contract: a MoeRequest (JacclMoeRequest in C) describes the rows, the four routing
// lists of moe/moe.h and the output as the program computed them. check_moe_request() is the one
// check of its shapes against a group of n ranks (offsets of n + 1 entries, rows of one length,
// combine's row type, weights or dout and output shapes); it throws Error(kInvalidArgument) naming
// what is wrong. The values in the lists are checked where they are read (moe/run.h on the host,
// the kernels on the peer path).
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collectives/request.h"
#include "common/c_struct.h"

#ifdef __cplusplus
extern "C" {
#endif

// The routing lists of moe/moe.h, by index into JacclMoeRequest::lists.
enum { kJacclMoeSendRows = 0, kJacclMoeSendOffsets, kJacclMoeRecvRows, kJacclMoeRecvOffsets };

// Dispatch: `rows` are the rows to send, `out` receives out_rows rows; topk_idx is validated
// against num_experts. Combine: `rows` are the expert outputs y, `extra` the router weights
// (float32 [out_rows, topk]) or, with pair_dot, dout ([out_rows, row_elems] of the rows' dtype);
// `out` is [out_rows, row_elems] or float32 [out_rows, topk].
struct JacclMoeRequest {
  struct JacclCallAddress address;  // kind kMoeDispatch or kMoeCombine; dtype: of the rows
  const void* rows JACCL_DEFAULT(nullptr);
  uint64_t rows_count JACCL_DEFAULT(0);  // rows
  uint64_t row_elems JACCL_DEFAULT(0);
  const int32_t* lists[4] JACCL_DEFAULT({});
  uint64_t list_counts[4] JACCL_DEFAULT({});
  const int32_t* topk_idx JACCL_DEFAULT(nullptr);  // dispatch
  uint64_t topk_count JACCL_DEFAULT(0);
  int64_t num_experts JACCL_DEFAULT(0);
  const void* extra JACCL_DEFAULT(nullptr);  // combine: weights or dout
  uint64_t extra_count JACCL_DEFAULT(0);
  JACCL_FIELD(jaccl::Dtype, uint8_t) extra_dtype JACCL_DEFAULT(jaccl::Dtype::kF32);
  int64_t topk JACCL_DEFAULT(0);
  bool pair_dot JACCL_DEFAULT(false);
  void* out JACCL_DEFAULT(nullptr);
  uint64_t out_rows JACCL_DEFAULT(0);
  uint64_t out_count JACCL_DEFAULT(0);  // elements
};

typedef struct JacclMoeRequest JacclMoeRequest;

#ifdef __cplusplus
}  // extern "C"

namespace jaccl {

using MoeRequest = JacclMoeRequest;

enum MoeList {
  kSendRows = kJacclMoeSendRows,
  kSendOffsets = kJacclMoeSendOffsets,
  kRecvRows = kJacclMoeRecvRows,
  kRecvOffsets = kJacclMoeRecvOffsets
};

void check_moe_request(const MoeRequest& request, int n);

// The bytes of the request's output: float32 [tokens, topk] for combine's pair_dot, else
// out_count elements of the rows' dtype.
size_t out_bytes(const MoeRequest& request);

}  // namespace jaccl
#endif
