// MoE expert parallelism: the row exchanges behind dispatch and combine.
//
// The routing (which rows go to which rank, in which order, into which slots) is computed
// by every rank from the all-gathered expert counts (jax_jaccl/_ops/moe_routing.py); here
// the rows move. Only rows that exist travel: per peer, the lists say how many rows there
// are, and each becomes one stream of exactly those rows, gathered from and scattered to
// their places without staging. Rows for this rank's own experts never leave the process.
//
// Lists: for every peer rank q, rows[offsets[q] .. offsets[q+1]) in stream order; both
// ends derive them from the same counts, so stream lengths agree (the frame headers check).
//
// Schedules (JACCL_MOE_SCHEDULE): remote-first (default) lists the streams to other hosts
// first, then to other processes of this host, then within the process, and reduces the
// rows already here while the network drains; arrival lists peers in rank order and
// reduces only when everything has arrived. Every rank uses the same schedule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/engine.h"

namespace jaccl {

enum class MoeSchedule { kRemoteFirst, kArrival };
// The combine schedule and the benchmarks' local delay, as the host set them
// (JACCL_MOE_SCHEDULE, JACCL_MOE_LOCAL_DELAY_US through configure()).
MoeSchedule moe_schedule();
void set_moe_schedule(MoeSchedule schedule);
MoeSchedule parse_moe_schedule(const std::string& name);  // throws for an unknown name
void set_moe_local_delay_us(int delay_us);

struct RowLists {
  const int32_t* send_rows;
  const int32_t* send_offsets;  // group size + 1 entries
  size_t send_capacity;         // entries send_rows may hold
  const int32_t* recv_rows;
  const int32_t* recv_offsets;
  size_t recv_capacity;
};

// dst (dst_rows x row_elems) = zero, then for every peer q and i-th listed row:
// dst[recv_rows[..]] = src[send_rows[..]] of peer q's i-th listed row for this rank.
void moe_dispatch(Call& call, const void* src, size_t src_rows, void* dst, size_t dst_rows,
                  size_t row_elems, const RowLists& lists, MoeSchedule schedule);

// The way back: `y` rows listed in send_rows go to the rank whose (token, k) pair they
// serve; recv_rows lists, per expert rank, the pair indices (t * topk + k) in stream order.
// weighted_sum: out[t] = sum over k ascending of weights[t, k] * row(t, k), accumulated in
// float32, cast to y's dtype; pairs without a row are skipped. pair_dot: out[t, k] =
// <dout[t], row(t, k)> in float32 (0 for pairs without a row).
struct CombineArgs {
  const void* y = nullptr;
  size_t y_rows = 0;
  size_t row_elems = 0;
  size_t tokens = 0, topk = 0;
  const float* weights = nullptr;  // weighted_sum
  const void* dout = nullptr;      // pair_dot
  void* out = nullptr;
  bool pair_dot = false;
};

void moe_combine(Call& call, const CombineArgs& args, const RowLists& lists, MoeSchedule schedule);

}  // namespace jaccl
