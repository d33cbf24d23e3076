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
#include "moe/request.h"

namespace jaccl {

enum class MoeSchedule { kRemoteFirst, kArrival };
// The combine schedule and the benchmarks' local delay, as the host set them
// (JACCL_MOE_SCHEDULE, JACCL_MOE_LOCAL_DELAY_US through configure()).
MoeSchedule moe_schedule();
void set_moe_schedule(MoeSchedule schedule);
MoeSchedule parse_moe_schedule(const std::string& name);  // throws for an unknown name
void set_moe_local_delay_us(int delay_us);

// Both take a request (moe/request.h) of host buffers, its lists by MoeList: send_rows and
// send_offsets (group size + 1 entries; list_counts[kSendRows]: the entries send_rows may hold),
// recv_rows and recv_offsets likewise.

// Dispatch: out (out_rows x row_elems) = zero, then for every peer q and i-th listed row:
// out[recv_rows[..]] = rows[send_rows[..]] of peer q's i-th listed row for this rank.
void moe_dispatch(Call& call, const MoeRequest& request, MoeSchedule schedule);

// Combine, the way back: the rows y (`rows`) listed in send_rows go to the rank whose (token, k)
// pair they serve; recv_rows lists, per expert rank, the pair indices (t * topk + k) in stream
// order. The weighted sum: out[t] = sum over k ascending of weights[t, k] * row(t, k)
// (`extra`: float32 weights [out_rows, topk]), accumulated in float32, cast to y's dtype; pairs
// without a row are skipped. With pair_dot: out[t, k] = <dout[t], row(t, k)> in float32, summed
// over the elements in ascending order (0 for pairs without a row; `extra`: dout [out_rows,
// row_elems] of y's dtype).
//
// Under remote-first, within one host, each other rank's rows, which moe_routing.py lists token
// by token, pass through a ring of rows that the sums (or dots) empty as they go, instead of
// being staged whole (moe.cc, RowRings): the same results, from cache.
void moe_combine(Call& call, const MoeRequest& request, MoeSchedule schedule);

// Combine streams this process received through rings since it started.
uint64_t moe_streams_through_rings();

}  // namespace jaccl
