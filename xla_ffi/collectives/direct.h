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

#include <atomic>
#include <cstdint>
#include <vector>

#include "collectives/collectives.h"

namespace jaccl {

struct DirectGroup {
  explicit DirectGroup(int size) : entries(size) {}

  struct alignas(64) Entry {
    std::atomic<uint32_t> calls{0};  // collectives published so far (seq + 1)
    const void* in = nullptr;
    void* out = nullptr;
    uint64_t in_count = 0, out_count = 0, outer_in = 1, outer_out = 1;
    const Buffers* buffers = nullptr;  // the whole call (ppermute, ragged_all_to_all)
    uint8_t kind = 0, dtype = 0, redop = 0;
  };
  std::vector<Entry> entries;             // by rank
  alignas(64) std::atomic<uint64_t> arrivals{0};
  std::vector<Doorbell*> doorbells;       // by rank
};

void direct_collective(Call& call, const Buffers& buffers);

}  // namespace jaccl
