/* What libjaccl_mpiabi.so (the mpiabi library XLA:CPU's 'mpi' collectives load through
 * MPItrampoline) is given by the _jaccl extension, so that the collectives XLA emits run on the
 * one engine of the process. The mpiabi library holds no engine of its own.
 *
 * Contract: _jaccl's mpiabi_attach() opens the already loaded mpiabi library (RTLD_NOLOAD) and
 * calls its jaccl_mpiabi_attach(&table) once the world is up, and again, the table refilled, for
 * each world after a lost process (one device per process only); the table and what it points to
 * live until the process exits. Each function returns 0, or non-zero with jaccl's message in
 * `error`. The world has devices_per_process devices in every process: devices[p *
 * devices_per_process + i] is process p's i-th (by id). With more than one, the world shares
 * channels (transport/shared_channel.h) and the mpiabi library places each communicator's members
 * on devices of its choosing (it cannot tell which XLA device calls). Plain C: the mpiabi library
 * is C only (it is loaded with RTLD_DEEPBIND, where a second C++ runtime would be trouble). */
#ifndef JACCL_HANDLERS_MPIABI_TABLE_H
#define JACCL_HANDLERS_MPIABI_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "abi/host_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: JacclHostCall and JacclHostP2p carry a space; 3: and one word for the lane or the split
 * round, devices per process; 4: world_failed; 5: JacclHostCall's ragged index arrays int32 or
 * int64; 6: JacclHostCall's lane and split round apart; 7: JacclCollectiveRequest (the engine's
 * own request, collectives/request.h) and JacclHostP2p start with a JacclCallAddress; 8:
 * communicator_id */
enum { kJacclMpiEngineVersion = 8 };

/* The call site (common/call_sites.h) of the exchange inside the mpiabi library's MPI_Comm_split,
 * which _jaccl names at attach: a rank that splits where its peer runs a collective is told so. */
enum { kJacclMpiabiSplitSite = 0x53504c54 /* "SPLT" */ };

typedef struct JacclMpiEngine {
  uint32_t version;            /* kJacclMpiEngineVersion */
  int32_t my_process;
  int32_t num_processes;
  int32_t devices_per_process;
  const int64_t* devices;      /* num_processes * devices_per_process, process by process */
  double timeout_s;            /* JACCL_TIMEOUT: how long a split waits for this process's devices */
  int32_t kind_all_reduce, kind_reduce_scatter, kind_all_gather;   /* CollectiveKind codes */
  int32_t (*dtype_code)(const char* name);   /* "float32" -> Dtype; -1 if unknown */
  int32_t (*reduce_code)(const char* name);  /* "sum" -> ReduceOp; -1 if unknown */
  /* the engine's id of the communicator of one group (`size` devices in rank order) of XLA's
   * collectives made in `split_round` (comm/communicator.h): a call carries it */
  uint64_t (*communicator_id)(const int64_t* group, size_t size, uint64_t split_round);
  JacclRunHostCall run_call;   /* a collective over one group (abi/host_abi.h) */
  JacclRunHostP2p run_p2p;     /* sends and receives between ranks of one group */
  JacclRaiseAbort raise_abort;
  JacclWorldFailed world_failed; /* the world failed: a split first asks for the survivors' */
} JacclMpiEngine;

typedef int (*JacclMpiAttach)(const JacclMpiEngine* engine, char* error, size_t error_len);

#ifdef __cplusplus
}
#endif

#endif
