// The C interface one extension module uses to run the CPU engine of another: the CUDA
// handlers (_jaccl_cuda) stage device buffers through pinned host memory and hand them to
// the engine that _jaccl owns (one World per process, whichever module calls it).
//
// Also the mpiabi library's way into the engine (abi/mpiabi_table.h): plain C, so the mpiabi
// library (a C library) includes it too.
//
// Contract: the requests are collectives/request.h's and moe/request.h's C structs, the engine's
// own (declared once for C and C++). jaccl_run_host_call runs one collective
// (ppermute and ragged_all_to_all too, checked there), jaccl_run_host_moe one MoE dispatch or
// combine, jaccl_run_host_p2p one device's point-to-point transfers, for one device on host
// buffers, as the CPU FFI handlers do (they call the same code: host_abi.cc); each returns 0, or
// non-zero with a message in `error` (also posted on the abort board, so the peers stop too).
// Thread-safe in the engine's usual sense: one caller per device at a time.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "collectives/request.h"
#include "moe/request.h"

// Sequence spaces (comm/spaces.h), as the mpiabi library names them.
enum { kJacclOwnOps = 0, kJacclXlaCollectives = 1 };

#ifdef __cplusplus
static_assert(static_cast<int>(jaccl::Space::kOwnOps) == kJacclOwnOps &&
              static_cast<int>(jaccl::Space::kXlaCollectives) == kJacclXlaCollectives);

extern "C" {
#endif

typedef int (*JacclRunHostCall)(const JacclCollectiveRequest* call, char* error, size_t error_len);

int jaccl_run_host_call(const JacclCollectiveRequest* call, char* error, size_t error_len);

typedef int (*JacclRunHostMoe)(const JacclMoeRequest* call, char* error, size_t error_len);

int jaccl_run_host_moe(const JacclMoeRequest* call, char* error, size_t error_len);

// Point-to-point transfers of one device to and from ranks of one group (a one-row table of
// global device ids, in rank order), all run together (collectives/point_to_point.cc).
struct JacclTransfer {
  int64_t peer;  // rank in the group
  void* data;    // read for a send, written for a receive
  uint64_t bytes;
};

struct JacclHostP2p {
  // one group (groups_len == group_size); the engine sets kind and dtype (kPointToPoint, uint8)
  struct JacclCallAddress address;
  const struct JacclTransfer* sends;
  size_t num_sends;
  const struct JacclTransfer* receives;
  size_t num_receives;
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
