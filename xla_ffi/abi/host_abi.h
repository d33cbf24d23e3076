// The C interface one extension module uses to run the CPU engine of another: the CUDA
// handlers (_jaccl_cuda) stage device buffers through pinned host memory and hand them to
// the engine that _jaccl owns (one World per process, whichever module calls it).
//
// Also the MPI ABI shim's way into the engine (abi/mpiabi_table.h): plain C, so the shim
// (a C library) includes it too.
//
// Contract: jaccl_run_host_call runs one collective (ppermute and ragged_all_to_all too: a
// collectives/request.h request, checked there),
// jaccl_run_host_moe one MoE row exchange or combine, for one device on host buffers, as the
// CPU FFI handlers do (they call the same code: host_abi.cc); each returns 0, or non-zero with
// a message in `error` (also posted on the abort board, so the peers stop too). Thread-safe
// in the engine's usual sense: one caller per device at a time.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Sequence spaces: the collectives XLA hands the MPI shim are numbered apart from jaccl's own
// ops on the same group of devices (a communicator of their own), so that a jaccl op on one
// rank never pairs with an XLA collective on another: ranks that take them in different orders
// get "ranks disagree", never each other's data.
enum { kJacclOwnOps = 0, kJacclXlaCollectives = 1 };

struct JacclHostCall {
  int32_t kind;           // CollectiveKind
  int64_t device;         // global device id
  const int64_t* groups;  // group table, as the FFI attribute
  size_t groups_len;
  int64_t group_size;
  int32_t dtype;          // Dtype
  int32_t op;             // ReduceOp
  int32_t algorithm;      // Algorithm
  const void* in;
  void* out;
  uint64_t in_count, out_count, outer_in, outer_out;
  // ppermute: the (source, dest) rank pairs of the permutation
  const int64_t* perm;
  size_t perm_len;
  // ragged_all_to_all: input_offsets, send_sizes, output_offsets, recv_sizes (`ragged_len`
  // entries each, of ragged_bytes[i] = 4 or 8 bytes: int32 or int64), and the operand's and
  // output's rows; `out` starts as the output operand
  const void* ragged[4];
  int32_t ragged_bytes[4];
  size_t ragged_len;
  uint64_t in_rows, out_rows, row_elems;
  int32_t space;          // kJacclOwnOps, or kJacclXlaCollectives (the MPI shim's calls)
  uint32_t lane;          // kJacclOwnOps: the lane of the call's chain (comm/lanes.h)
  // kJacclXlaCollectives: the MPI shim's split round that made the communicator (with several
  // devices per process; 0: none), which tells apart communicators of equal tables
  uint64_t split_round;
  uint32_t site;          // where the call was written (common/call_sites.h; 0: none)
};

typedef struct JacclHostCall JacclHostCall;
typedef int (*JacclRunHostCall)(const JacclHostCall* call, char* error, size_t error_len);

int jaccl_run_host_call(const JacclHostCall* call, char* error, size_t error_len);

// The MoE ops (moe/moe.h). Exchange: `rows` are the rows to send, `out` receives out_rows
// rows; topk_idx is validated against num_experts. Combine: `rows` are the expert outputs y,
// `extra` the router weights (float32 [out_rows, topk]) or, with pair_dot, dout ([out_rows,
// row_elems] of the rows' dtype); `out` is [out_rows, row_elems] or float32 [out_rows, topk].
enum { kJacclMoeSendRows = 0, kJacclMoeSendOffsets, kJacclMoeRecvRows, kJacclMoeRecvOffsets };

struct JacclHostMoeCall {
  int32_t kind;           // CollectiveKind: kMoeDispatch (exchange) or kMoeCombine
  int64_t device;
  const int64_t* groups;
  size_t groups_len;
  int64_t group_size;
  int32_t dtype;          // Dtype of the rows
  const void* rows;
  uint64_t rows_count;    // rows
  uint64_t row_elems;
  const int32_t* lists[4];
  uint64_t list_counts[4];
  const int32_t* topk_idx;  // exchange
  uint64_t topk_count;
  int64_t num_experts;
  const void* extra;        // combine: weights or dout
  uint64_t extra_count;
  int32_t extra_dtype;      // Dtype
  int64_t topk;
  int32_t pair_dot;
  void* out;
  uint64_t out_rows;
  uint64_t out_count;       // elements
  uint32_t site;            // as JacclHostCall's
};

typedef struct JacclHostMoeCall JacclHostMoeCall;
typedef int (*JacclRunHostMoe)(const JacclHostMoeCall* call, char* error, size_t error_len);

int jaccl_run_host_moe(const JacclHostMoeCall* call, char* error, size_t error_len);

// Point-to-point transfers of one device to and from ranks of one group (a one-row table of
// global device ids, in rank order), all run together (collectives/point_to_point.cc).
struct JacclTransfer {
  int64_t peer;  // rank in the group
  void* data;    // read for a send, written for a receive
  uint64_t bytes;
};

struct JacclHostP2p {
  int64_t device;
  const int64_t* group;
  size_t group_size;
  const struct JacclTransfer* sends;
  size_t num_sends;
  const struct JacclTransfer* receives;
  size_t num_receives;
  int32_t space;          // as JacclHostCall's
  uint64_t split_round;   // as JacclHostCall's
};

typedef struct JacclHostP2p JacclHostP2p;
typedef int (*JacclRunHostP2p)(const JacclHostP2p* call, char* error, size_t error_len);

int jaccl_run_host_p2p(const JacclHostP2p* call, char* error, size_t error_len);

// Posts `why` on the abort board (peers stop within their deadline); no-op without a world.
typedef void (*JacclRaiseAbort)(const char* why);

void jaccl_raise_abort(const char* why);

// 1 when the world has failed (this process stopped communicating), 0 otherwise or without one.
typedef int (*JacclWorldFailed)(void);

int jaccl_world_failed(void);

#ifdef __cplusplus
}
#endif
