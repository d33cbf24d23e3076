// The collectives as free functions over a Communicator member.
//
// Contract: each function runs one collective for one local device and
// returns when this device's output is complete (or throws jaccl::Error).
// Every rank of the group must make the same call with the same counts.
// `out` may alias `in` for all_reduce (the result is written in place). Strided
// layouts are described by `outer`: the product of the sizes of the dimensions
// before the split (reduce_scatter, all_to_all input) or gather (all_gather,
// all_to_all output) dimension. call.algorithm must be resolved (choose_algorithm).
#pragma once

#include <cstddef>

#include "collectives/engine.h"

namespace jaccl {

struct Buffers {
  const void* in = nullptr;
  void* out = nullptr;
  size_t in_count = 0;
  size_t out_count = 0;
  size_t outer_in = 1;
  size_t outer_out = 1;
};

// What the automatic choice needs to know about the group.
struct GroupShape {
  int size = 1;
  bool in_process = false;    // every member is a device of this process
  bool hierarchical = false;  // spans hosts with the same number (> 1) of ranks on each
};

// Resolves kAuto (and the JACCL_ALGO override) for a message of `bytes`.
Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes,
                           const GroupShape& group);

void all_reduce(Call& call, const Buffers& buffers);
void reduce_scatter(Call& call, const Buffers& buffers);
void all_gather(Call& call, const Buffers& buffers);
void all_to_all(Call& call, const Buffers& buffers);

}  // namespace jaccl
