// One MoE row exchange or combine of this process's engine for one device, from the CPU
// handlers and (through handlers/host_abi.h) the CUDA module's staged host jobs alike.
//
// Contract: a MoeRequest describes host buffers (rows, the four routing lists of moe.h, the
// output) as the program computed them; run_moe() validates every list, offset and expert id
// against the buffers (a bad value is an error naming it, never a stray access), then runs
// moe_exchange (kMoeDispatch) or moe_combine (kMoeCombine) inside run_call (collectives/run.h):
// it never throws, and returns the failure it posted on the abort board.
#pragma once

#include <cstdint>
#include <optional>

#include "collectives/run.h"
#include "common/dtype.h"

namespace jaccl {

enum MoeList { kSendRows = 0, kSendOffsets, kRecvRows, kRecvOffsets };

struct MoeRequest {
  CollectiveKind kind = CollectiveKind::kMoeDispatch;  // or kMoeCombine
  int64_t device = 0;
  const int64_t* groups = nullptr;
  size_t groups_len = 0;
  int64_t group_size = 1;
  Dtype dtype = Dtype::kF32;  // of the rows
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
  uint32_t site = 0;  // common/call_sites.h
  uint32_t lane = 0;  // comm/lanes.h
};

std::optional<Failure> run_moe(const MoeRequest& request);

}  // namespace jaccl
