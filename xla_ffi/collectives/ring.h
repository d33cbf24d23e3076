// Ring schedules, shared by all_reduce, reduce_scatter and all_gather.
//
// A ring direction d with sign s (+1 sends to rank+1, -1 to rank-1) cuts the
// data into N blocks, one per rank.
//
// Reduce-scatter, N-1 steps: at step k rank r sends block r-s(k+1) and
// receives block r-s(k+2) from its left neighbour. Step 0 sends the rank's
// own input block. Every later step reduces the received partial with the
// local input block and writes the sum straight into the frame it forwards
// (partials travel in the accumulator type, so float16/bfloat16 sums
// accumulate in float32). The frame is the chunk-sized accumulator: the
// output is written once, at the last step, when block r arrives complete,
// so an output that aliases the input is never overwritten before it is read.
// Block b is reduced in the fixed order b+s, b+2s, ..., b, on every run.
//
// All-gather, N-1 steps: at step k rank r sends block r-sk (its own at
// step 0) and receives block r-s(k+1), storing it and forwarding it unless it
// is the last step.
#pragma once

#include <functional>

#include "collectives/engine.h"

namespace jaccl {

using BlockOf = std::function<Region(int block)>;

// Appends the reduce-scatter tasks of one direction; the last one writes
// `out` (block r).
void add_ring_reduce_scatter(const Call& call, Phase& phase, uint32_t phase_id, int direction,
                            const BlockOf& in_block, const Region& out);

// Appends the all-gather tasks of one direction. `own` is this rank's block.
void add_ring_all_gather(const Call& call, Phase& phase, uint32_t phase_id, int direction,
                         const Region& own, const BlockOf& out_block);

// 1 for one-way rings and for two ranks (both directions would share one
// pair of channels), 2 otherwise.
int ring_directions(const Call& call);

}  // namespace jaccl
