/* What the files of libjaccl_mpiabi.so share: the records of a communicator and of a datatype,
 * the world attached, and the helpers one file calls in another. The hand-written files:
 * mpiabi.c (errors, the engine and its world, datatypes, attaching, initialisation, the
 * collectives), comms.c (communicators: rank, size, split, dup, free), recovery.c (after a lost
 * process or one that came back: the world renewed, communicators checked and split again) and
 * p2p.c (point to point); the generated half (mpiabi_exports.c, by generate.py: the constants,
 * the versions and a stub for every other MPI function) includes it too. Nothing here is
 * exported: the library's export list (mpiabi_exports.map) names the MPI calls and
 * jaccl_mpiabi_* alone. MPI_<NAME> are the values jaccl gives MPI's constants
 * (mpiabi_values.h, generated); the library exports them as MPIABI_<NAME>.
 *
 * Contract: a helper that fails records this thread's error (fail(): the code, and the message
 * MPI_Error_string gives) and returns the code, or NULL where it returns a pointer, which the
 * MPI call then returns as last_code. mpiabi_unsupported() records, for this thread, that an
 * MPI function jaccl does not implement was called; MPI_Error_string then names it. */
#ifndef JACCL_MPIABI_MPIABI_H
#define JACCL_MPIABI_MPIABI_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "abi/mpiabi_table.h"

#define MPIABI_EXPORT __attribute__((visibility("default")))

/* The versions the trampoline reads: MPItrampoline's ABI 2.9 (5.3.1, in jaxlib 0.10 to 0.12),
 * and this wrapper's own version (jaccl's, not an MPIwrapper). */
#define MPIABI_VERSION_MAJOR 2
#define MPIABI_VERSION_MINOR 9
#define MPIABI_VERSION_PATCH 0
#define MPIWRAPPER_VERSION_MAJOR 0
#define MPIWRAPPER_VERSION_MINOR 1
#define MPIWRAPPER_VERSION_PATCH 0
enum { kMessageBytes = 1024, kCommMagic = 0x4a434f4d, kRequestMagic = 0x4a524551 };

typedef struct MpiabiComm {
  uint32_t magic;
  int rank, size;
  int local_devices;  /* MPI_COMM_WORLD with several devices per process: how many; else 1 */
  uint64_t split_round; /* the split round that made it, with several devices per process */
  uint64_t id;          /* its communicator's id in the engine (name_comm; 0: derived there) */
  int xla_group;      /* made by XLA's split of MPI_COMM_WORLD */
  unsigned comebacks; /* how many processes had come back when it was (last) made */
  unsigned inside;    /* the last attach whose world was seen to hold its devices */
  int64_t devices[];  /* the group in rank order */
} MpiabiComm;


typedef struct {
  uintptr_t handle;
  const char* name;  /* the engine's element type */
  int size, parts;   /* bytes per MPI element; engine elements per MPI element */
  int32_t code;      /* filled at attach */
} MpiabiType;

/* Errors (mpiabi.c): this thread's last failure. */
extern __thread char last_message[kMessageBytes];
extern __thread int last_code;
int fail(int code, const char* format, ...);
void mpiabi_unsupported(const char* function);

/* The engine and its world (mpiabi.c). */
extern const JacclMpiEngine* _Atomic engine;  /* NULL until attached */
extern int expected_rank, expected_size;       /* WORLD's answers before the attach */
extern atomic_uint comebacks, attaches;        /* processes come back, worlds attached */
extern int most_processes;                     /* the most any world attached here had */
extern MpiabiComm* world_comm;
extern MpiabiComm* processes_comm;  /* one device per process: where split rounds exchange */
MpiabiComm* new_comm(int rank, int size);
/* Sets c->id from its devices and split round, as `e` computes it (0 without one), once they
 * are final; a call on `c` carries it (address_on). */
void name_comm(MpiabiComm* c, const JacclMpiEngine* e);
int run_python(const char* code);
const JacclMpiEngine* attached(void);
void remember_split_failure(void);
MpiabiComm* comm_of(uintptr_t handle);
static inline int64_t my_device(const MpiabiComm* c) { return c->devices[c->rank]; }
/* The address (collectives/request.h) of this process's calls on `c`, in XLA's space. */
static inline JacclCallAddress address_on(const MpiabiComm* c) {
  JacclCallAddress a;
  memset(&a, 0, sizeof a);
  a.space = kJacclXlaCollectives;
  a.device = my_device(c);
  a.groups = c->devices;
  a.groups_len = (size_t)c->size;
  a.group_size = c->size;
  a.split_round = c->split_round;
  a.comm = c->id;
  return a;
}
const MpiabiType* type_of(uintptr_t handle);

/* Collectives (mpiabi.c). */
extern atomic_ulong served;  /* XLA's collectives and transfers run here */
int refuse_world(const MpiabiComm* c);
int refuse_wrapped_count(const char* name, int count);
int collective_at(int32_t kind, const MpiabiComm* c, const MpiabiType* type, int32_t op,
                  const void* in, void* out, size_t count, size_t out_count, uint32_t site);
int collective(int32_t kind, const MpiabiComm* c, const MpiabiType* type, int32_t op,
               const void* in, void* out, size_t count, size_t out_count);

/* Communicators (comms.c). */
int split_of(const MpiabiComm* parent, int color, int key, uintptr_t* newcomm);

/* After a loss or a comeback (recovery.c). */
int lacks_processes(void);
int in_world(int64_t id);
int world_for_split(void);
int check_after_loss(uintptr_t* newcomm, uint64_t round);
MpiabiComm* comm_in_use(uintptr_t handle);

#endif
