// One collective call as every caller describes it: the CPU handlers from XLA's buffers and
// attributes, the MPI shim and the CUDA module's staged host jobs (through abi/host_abi.h),
// and the CUDA peer path before it enqueues anything.
//
// Contract: a CollectiveRequest names its communicator (the `groups` table, group_size devices
// per row, in sequence space `space`), the calling device, its buffers (elements of `dtype`)
// and the arguments of its kind. check_request() is the one check of a request's form against
// a group of n ranks: element counts that split over the group as the kind needs, ppermute
// pairs inside the group, ragged_all_to_all's four index arrays (int32 or int64, as many
// entries each, a multiple of n) and rows of one length in the operand and the output. It
// throws Error(kInvalidArgument) naming what is wrong and returns ppermute's partners of
// `rank`. The index arrays' values are data (on a GPU they live on the device): the ragged
// engine checks them as it reads them (ragged_all_to_all.cc, check_ragged_rows).
// A PointToPointRequest is the MPI shim's sends and receives between ranks of one group, with
// no collective around them; point_to_point() checks its peers as it runs them.
// collectives/run.h runs both (run_collective, run_point_to_point).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/kinds.h"
#include "common/dtype.h"
#include "common/reduce.h"

namespace jaccl {

// ppermute: the rank this rank sends its input to and the one whose input it receives
// (-1: none; a rank that receives nothing gets zeros).
struct Permutation {
  int send_to = -1;
  int receive_from = -1;
};

// One of ragged_all_to_all's index arrays as the program passed it: `bytes` 4 (int32) or 8
// (int64) per entry; anything else is refused by check_request().
struct IndexArray {
  const void* data = nullptr;
  size_t count = 0;
  int bytes = 8;
};

enum RaggedIndex { kInputOffsets = 0, kSendSizes, kOutputOffsets, kRecvSizes };

// Which communicator and member a call runs on, and what it says of itself: the part every
// request shares (collectives/run.h's run_call() takes it).
struct CallAddress {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int64_t device = 0;               // global device id
  const int64_t* groups = nullptr;  // the group table, device ids in rank order
  size_t groups_len = 0;
  int64_t group_size = 1;
  Dtype dtype = Dtype::kF32;
  int32_t space = 0;         // 0: jaccl's own ops; 1: XLA's collectives (abi/host_abi.h)
  uint32_t lane = 0;         // space 0: the lane of the call's chain (comm/lanes.h)
  uint64_t split_round = 0;  // space 1: the MPI shim's split round (0: none)
  uint32_t site = 0;  // where the call was written (common/call_sites.h; 0: none)
};

struct CollectiveRequest : CallAddress {
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
  const void* in = nullptr;
  void* out = nullptr;
  size_t in_count = 0, out_count = 0;  // elements
  size_t outer_in = 1, outer_out = 1;  // elements before the split / gather dimension
  // ppermute: (source, dest) rank pairs, flattened
  const int64_t* pairs = nullptr;
  size_t pairs_len = 0;
  // ragged_all_to_all: by RaggedIndex; `out` holds the output operand's rows already, or
  // nothing with zero_unwritten (the engine zeroes the rows nothing arrives at)
  IndexArray ragged[4];
  size_t in_rows = 0, out_rows = 0;  // leading dimensions of the operand and the output
  size_t row_elems = 1;               // elements per row of both
  bool zero_unwritten = false;
};

// One transfer of a PointToPointRequest: `bytes` to or from group rank `peer` (not this rank).
struct Transfer {
  int peer = -1;
  void* data = nullptr;
  size_t bytes = 0;
};

// kind kPointToPoint, dtype uint8, one group (groups_len == group_size).
struct PointToPointRequest : CallAddress {
  std::vector<Transfer> sends, receives;
};

Permutation check_request(const CollectiveRequest& request, int n, int rank);

// The entries of one index array, widened to int64 (after check_request()).
void widen(const IndexArray& array, int64_t* out);

}  // namespace jaccl
