// One collective call as every caller describes it, declared once for C and C++
// (common/c_struct.h): the CPU handlers from XLA's buffers and attributes, the mpiabi library and
// the CUDA module's staged host jobs (through abi/host_abi.h), and the CUDA peer path.
//
// Contract: a CollectiveRequest (JacclCollectiveRequest in C) names in its `address` its
// communicator (the `groups` table, group_size devices per row, in sequence space `space`), the
// calling device and its buffers' element type, then its buffers and the arguments of its kind.
// check_request() is the one check of a request's form against a group of n ranks: element counts
// that split over the group as the kind needs, ppermute pairs inside the group, ragged_all_to_all's
// four index arrays (int32 or int64, as many entries each, a multiple of n) and rows of one length
// in the operand and the output. It throws Error(kInvalidArgument) naming what is wrong and returns
// ppermute's partners of `rank`. The index arrays' values are data (on a GPU they live on the
// device): the ragged engine checks them as it reads them (ragged_all_to_all.cc,
// check_ragged_rows). A PointToPointRequest is the mpiabi library's sends and receives between
// ranks of one group, with no collective around them; point_to_point() checks its peers as it runs
// them. collectives/run.h runs both (run_collective, run_point_to_point).
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/c_struct.h"

#ifdef __cplusplus
#include <vector>

#include "collectives/kinds.h"
#include "comm/spaces.h"
#include "common/dtype.h"
#include "common/reduce.h"

extern "C" {
#endif

// Which communicator and member a call runs on, and what it says of itself: the part every
// request shares (collectives/run.h's run_call() takes it).
struct JacclCallAddress {
  JACCL_FIELD(jaccl::CollectiveKind, uint8_t) kind JACCL_DEFAULT(jaccl::CollectiveKind::kAllReduce);
  JACCL_FIELD(jaccl::Dtype, uint8_t) dtype JACCL_DEFAULT(jaccl::Dtype::kF32);  // the buffers'
  JACCL_FIELD(jaccl::Space, int32_t) space JACCL_DEFAULT(jaccl::Space::kOwnOps);  // comm/spaces.h
  int64_t device JACCL_DEFAULT(0);               // global device id
  const int64_t* groups JACCL_DEFAULT(nullptr);  // the group table, device ids in rank order
  size_t groups_len JACCL_DEFAULT(0);
  int64_t group_size JACCL_DEFAULT(1);           // devices per row of the table
  uint32_t lane JACCL_DEFAULT(0);  // jaccl's own ops: the lane of the call's chain (comm/lanes.h)
  // XLA's collectives: the mpiabi library's split round that made the communicator (with several
  // devices per process; 0: none), which tells apart communicators of equal tables
  uint64_t split_round JACCL_DEFAULT(0);
  uint32_t site JACCL_DEFAULT(0);  // where the call was written (common/call_sites.h; 0: none)
  // the communicator's id (comm/communicator.h's communicator_id() of the rest), fixed where
  // the call was made (jaccl's lowering); 0: the engine derives it
  uint64_t comm JACCL_DEFAULT(0);
};

// One of ragged_all_to_all's index arrays as the program passed it: `bytes` 4 (int32) or 8
// (int64) per entry; anything else is refused by check_request().
struct JacclIndexArray {
  const void* data JACCL_DEFAULT(nullptr);
  size_t count JACCL_DEFAULT(0);
  int32_t bytes JACCL_DEFAULT(8);
};

struct JacclCollectiveRequest {
  struct JacclCallAddress address;
  JACCL_FIELD(jaccl::ReduceOp, uint8_t) op JACCL_DEFAULT(jaccl::ReduceOp::kSum);
  JACCL_FIELD(jaccl::Algorithm, uint8_t) algorithm JACCL_DEFAULT(jaccl::Algorithm::kAuto);
  const void* in JACCL_DEFAULT(nullptr);
  void* out JACCL_DEFAULT(nullptr);
  uint64_t in_count JACCL_DEFAULT(0), out_count JACCL_DEFAULT(0);  // elements
  // elements before the split (reduce_scatter, all_to_all's input) or gather (all_gather,
  // all_to_all's output) dimension
  uint64_t outer_in JACCL_DEFAULT(1), outer_out JACCL_DEFAULT(1);
  // ppermute: the (source, dest) rank pairs, flattened
  const int64_t* pairs JACCL_DEFAULT(nullptr);
  size_t pairs_len JACCL_DEFAULT(0);
  // ragged_all_to_all: the index arrays by RaggedIndex, the leading dimensions of the operand
  // and the output, and the elements of a row of both; `out` holds the output operand's rows
  // already, or nothing with zero_unwritten (the engine zeroes the rows nothing arrives at)
  struct JacclIndexArray ragged[4];
  uint64_t in_rows JACCL_DEFAULT(0), out_rows JACCL_DEFAULT(0), row_elems JACCL_DEFAULT(1);
  bool zero_unwritten JACCL_DEFAULT(false);
};

typedef struct JacclCallAddress JacclCallAddress;
typedef struct JacclIndexArray JacclIndexArray;
typedef struct JacclCollectiveRequest JacclCollectiveRequest;

#ifdef __cplusplus
}  // extern "C"

namespace jaccl {

using CallAddress = JacclCallAddress;
using IndexArray = JacclIndexArray;
using CollectiveRequest = JacclCollectiveRequest;

enum RaggedIndex { kInputOffsets = 0, kSendSizes, kOutputOffsets, kRecvSizes };

// ppermute: the rank this rank sends its input to and the one whose input it receives
// (-1: none; a rank that receives nothing gets zeros).
struct Permutation {
  int send_to = -1;
  int receive_from = -1;
};

// One transfer of a PointToPointRequest: `bytes` to or from group rank `peer` (not this rank).
struct Transfer {
  int peer = -1;
  void* data = nullptr;
  size_t bytes = 0;
};

// The address's kind kPointToPoint, dtype uint8, one group (groups_len == group_size).
struct PointToPointRequest {
  CallAddress address;
  std::vector<Transfer> sends, receives;
};

Permutation check_request(const CollectiveRequest& request, int n, int rank);

// The entries of one index array, widened to int64 (after check_request()).
void widen(const IndexArray& array, int64_t* out);

}  // namespace jaccl
#endif
