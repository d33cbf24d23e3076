// One MoE row exchange or combine as every caller describes it: the CPU handlers from XLA's
// buffers, the CUDA module's staged host jobs (through abi/host_abi.h), and the CUDA peer
// path before it enqueues anything.
//
// Contract: a MoeRequest describes the rows, the four routing lists of moe/moe.h and the output
// as the program computed them. check_moe_request() is the one check of its shapes against a
// group of n ranks (offsets of n + 1 entries, rows of one length, combine's row type, weights
// or dout and output shapes); it throws Error(kInvalidArgument) naming what is wrong. The
// values in the lists are checked where they are read (moe/run.h on the host, the kernels on
// the peer path).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/kinds.h"
#include "collectives/request.h"
#include "common/dtype.h"

namespace jaccl {

enum MoeList { kSendRows = 0, kSendOffsets, kRecvRows, kRecvOffsets };

// kind kMoeDispatch or kMoeCombine; dtype: of the rows; space 0.
struct MoeRequest : CallAddress {
  const void* rows = nullptr;
  uint64_t rows_count = 0, row_elems = 0;
  const int32_t* lists[4] = {};  // by MoeList
  uint64_t list_counts[4] = {};
  const int32_t* topk_idx = nullptr;  // exchange: validated against num_experts
  uint64_t topk_count = 0;
  int64_t num_experts = 0;
  const void* extra = nullptr;  // combine: float32 weights [out_rows, topk], or dout (pair_dot)
  uint64_t extra_count = 0;
  Dtype extra_dtype = Dtype::kF32;
  int64_t topk = 0;
  bool pair_dot = false;
  void* out = nullptr;
  uint64_t out_rows = 0, out_count = 0;
};

void check_moe_request(const MoeRequest& request, int n);

}  // namespace jaccl
