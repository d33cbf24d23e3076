// Collectives of in-process groups: when every member of a group is a device of this
// process, members read each other's buffers directly, one copy, no frames.
//
// Schedule: every member publishes its buffers and call (sequence number, kind, dtype, op,
// count) and meets the others at a barrier; calls that disagree stop with an error naming
// both ranks. Then:
// - all_reduce: member r reduces block r of every input, in ascending rank order, into its
//   output; barrier; copies every other block from its owner's output; barrier. In place is
//   safe: nobody but r reads block r of r's buffer in the first step, and block q of r's
//   buffer is overwritten only after the barrier that ends q's reads.
// - reduce_scatter: member r reduces block r of every input into its output.
// - all_gather: member r copies every member's input into that member's block.
// - all_to_all: member r copies block r of member q's input into block q of its output.
// - ppermute: member r copies its source's input into its output (zeros without a source).
// - ragged_all_to_all: member r checks what each member q sends it against its own
//   recv_sizes and output, then copies q's rows into its output where q placed them.
// A last barrier keeps every member inside the call until nobody reads its buffers anymore.
#pragma once

#include "collectives/collectives.h"
#include "comm/direct_group.h"

namespace jaccl {

void direct_collective(Call& call, const Buffers& buffers);

}  // namespace jaccl
