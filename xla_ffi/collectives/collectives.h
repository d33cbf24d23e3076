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
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/engine.h"
#include "collectives/request.h"

namespace jaccl {

// ragged_all_to_all (jax.lax semantics), in rows of the request's `row_elems` elements, its
// index arrays widened to int64. Each array has slices_per_rank entries per rank of the group
// (entry i concerns rank i / slices_per_rank): rows [input_offsets[i], + send_sizes[i]) of `in`
// go to that rank, which writes them at its row output_offsets[i]; recv_sizes[i] rows arrive
// from that rank as its slice i % slices_per_rank for this rank. Rows of `out` that nothing
// arrives at keep their value (out starts as the op's `output` operand), or are zeroed with the
// request's zero_unwritten.
struct RaggedRows {
  const int64_t* input_offsets = nullptr;
  const int64_t* send_sizes = nullptr;
  const int64_t* output_offsets = nullptr;
  const int64_t* recv_sizes = nullptr;
  int slices_per_rank = 1;
};

// A checked request (collectives/request.h) and what the call derives from it: the collectives
// below take it.
struct Buffers : CollectiveRequest {
  Permutation permutation;  // ppermute only: this rank's partners
  RaggedRows ragged_rows;   // ragged_all_to_all only

  // Whether the input and the output share no byte: a stream of the input may then be read
  // in place until the call ends (engine.h, "Single copy").
  bool disjoint(size_t elem_bytes) const {
    const char* i = static_cast<const char*>(in);
    const char* o = static_cast<const char*>(out);
    return i + in_count * elem_bytes <= o || o + out_count * elem_bytes <= i;
  }
};

// What the automatic choice needs to know about the group.
struct GroupShape {
  int size = 1;
  bool in_process = false;    // every member is a device of this process
  bool hierarchical = false;  // spans hosts with the same number (> 1) of ranks on each
  bool process_runs = false;  // processes x equal runs of consecutive ranks (Member::process_run)
  bool one_host = true;       // every member is on this host
  bool any_order = false;     // the fold's bits do not depend on its order (integer types)
};

// Resolves kAuto (and the JACCL_ALGO override) for a message of `bytes`.
Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes,
                           const GroupShape& group);
// Sets the JACCL_ALGO override from its text; throws (changing nothing) for a bad one.
void set_algorithm_overrides(const std::string& spec);

void all_reduce(Call& call, const Buffers& buffers);
void reduce_scatter(Call& call, const Buffers& buffers);
void all_gather(Call& call, const Buffers& buffers);
void all_to_all(Call& call, const Buffers& buffers);
void permute(Call& call, const Buffers& buffers);
void ragged_all_to_all(Call& call, const Buffers& buffers);

// Runs the sends and receives together (collectives/point_to_point.cc); call.kind is
// kPointToPoint, call.seq 0 (transfers are numbered per pair of ranks).
void point_to_point(Call& call, const std::vector<Transfer>& sends,
                    const std::vector<Transfer>& receives);

// ragged_all_to_all's checks (both throw naming the entry and the ranks):
// check_ragged_rows: this rank's own arguments against its operand;
// check_ragged_placements: what every rank announced it sends here (from[i]: rows and offset
// in this rank's output of the slice recv_sizes[i] describes) against this rank's recv_sizes,
// its output's bounds, and each other.
struct RaggedPlacement {
  int64_t offset = 0;
  int64_t rows = 0;
};
void check_ragged_rows(const Call& call, const Buffers& buffers);
void check_ragged_placements(const Call& call, const Buffers& buffers,
                             const std::vector<RaggedPlacement>& from);
// Zeros the rows of `out` outside the (checked, disjoint) placements: an output that starts
// as zeros, without XLA filling (and page-faulting) a fresh buffer with them first.
void zero_unwritten_rows(const Buffers& buffers, Dtype dtype,
                         const std::vector<RaggedPlacement>& from);

}  // namespace jaccl
