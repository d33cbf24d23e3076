/* The mpiabi library after a lost process, and after one came back (mpiabi.h), in a job under
 * JAX's recoverability.
 *
 * After a loss (the world failed), a split of MPI_COMM_WORLD first lets the interpreter build
 * the survivors' world (renew_after_loss()), which attaches again: MPI_COMM_WORLD is the
 * survivors from then on, and a communicator XLA makes of it in a world that lacks processes
 * is checked against the groups of the programs compiled before (check_after_loss()). When a
 * process comes back (started again), the others' communicators are split again at their first
 * use (comm_in_use()), as the one that came back makes its own. The interpreter is entered
 * through Python's C API found in the process (run_python()). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpiabi_values.h"
#include "mpiabi.h"
#include "split_round.h"

static __thread char renew_problem[kMessageBytes];

/* Why renew_after_loss() made no new world though one failed (the interpreter says so). */
MPIABI_EXPORT void jaccl_mpiabi_renew_failed(const char* why) {
  snprintf(renew_problem, sizeof renew_problem, "%s", why);
}

/* Before XLA's communicator for a new group is made, when the world failed: after a lost
 * process, under JAX's recoverability, jaccl builds the world of the survivors here when no
 * jaccl op of the program did when it was lowered (a program of XLA's collectives alone). The
 * interpreter does it (jax_jaccl._bootstrap.renew_after_loss(): nothing without
 * recoverability; why not, through jaccl_mpiabi_renew_failed, when it could not). */
static void renew_after_loss(void) {
  run_python("__import__('jax_jaccl._bootstrap')._bootstrap.renew_after_loss()");
}

/* Whether the world attached may change while the job runs (JAX's recoverability on: the
 * interpreter says so at attach, jaccl_mpiabi_recoverable()). */
static atomic_int recoverable;

static __thread char group_problem[kMessageBytes];

/* Why _xla_groups.split_after_loss() refuses the communicator just made (the interpreter). */
MPIABI_EXPORT void jaccl_mpiabi_group_refused(const char* why) {
  snprintf(group_problem, sizeof group_problem, "%s", why);
}


/* A communicator XLA made of MPI_COMM_WORLD in a world that lacks processes (after a loss):
 * XLA never says a group's size, so a group of a program compiled before the loss that had
 * the lost devices at its end only comes out whole here, its live members alone. The
 * interpreter, which read every compiled program's groups, tells (jax_jaccl._xla_groups);
 * a refused communicator is freed and the split fails saying why. */
int check_after_loss(uintptr_t* newcomm, uint64_t round) {
  MpiabiComm* c = (MpiabiComm*)*newcomm;
  if (c == NULL || !atomic_load(&recoverable) || !lacks_processes()) return MPI_SUCCESS;
  const size_t bytes = 128 + 24 * (size_t)c->size;
  char* code = malloc(bytes);
  if (code == NULL) return fail(MPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  size_t at = (size_t)snprintf(code, bytes,
                               "__import__('jax_jaccl._xla_groups')._xla_groups.split_after_loss((");
  for (int i = 0; i < c->size; ++i) {
    at += (size_t)snprintf(code + at, bytes - at, "%lld,", (long long)c->devices[i]);
  }
  snprintf(code + at, bytes - at, "), %llu)", (unsigned long long)round);
  group_problem[0] = '\0';
  run_python(code);
  free(code);
  if (group_problem[0] == '\0') return MPI_SUCCESS;
  c->magic = 0;
  free(c);
  *newcomm = 0;
  return fail(MPI_ERR_OTHER, "%s", group_problem);
}

/* Whether the world attached lacks processes an earlier one had (lost, not back). */
int lacks_processes(void) { return atomic_load(&engine)->num_processes < most_processes; }

MPIABI_EXPORT void jaccl_mpiabi_recoverable(void) { atomic_store(&recoverable, 1); }

static void renew_with_those_back(void) {
  run_python("__import__('jax_jaccl._bootstrap')._bootstrap.renew_with_those_back()");
}

/* Before a split of MPI_COMM_WORLD: the world of the survivors when the world failed
 * (renew_after_loss()); in a job that recovers, the world with the processes that came back
 * when JAX reports some (renew_with_those_back(): the group XLA splits for may hold their
 * devices, which a split of the world without them would silently leave out). One device's
 * thread of a process renews it while the process's other devices' threads, splitting too,
 * wait: between the old world's end and the new one's attach no world reports a failure, and
 * MPI_COMM_WORLD is still the old world's. */
static pthread_mutex_t renew_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether the world attached has device `id`. */
int in_world(int64_t id) {
  const JacclMpiEngine* e = atomic_load(&engine);
  const int n = e->num_processes * e->devices_per_process;
  for (int j = 0; j < n; ++j) {
    if (e->devices[j] == id) return 1;
  }
  return 0;
}

/* Under renew_lock: the world XLA's next call needs, built by the interpreter: the survivors'
 * where the world failed (renew_after_loss()), else, with `ask_back`, the one with the
 * processes that came back (renew_with_those_back()). Fails with the interpreter's reason where
 * it could build none. */
static int renew_world(int ask_back) {
  renew_problem[0] = '\0';
  if (atomic_load(&engine)->world_failed()) renew_after_loss();
  else if (ask_back) renew_with_those_back();
  return renew_problem[0] != '\0' ? fail(MPI_ERR_OTHER, "%s", renew_problem) : MPI_SUCCESS;
}

int world_for_split(void) {
  pthread_mutex_lock(&renew_lock);
  const int rc = attached() == NULL ? last_code : renew_world(atomic_load(&recoverable));
  pthread_mutex_unlock(&renew_lock);
  return rc;
}

/* A process came back into the world now attached (the interpreter says so: a world with a
 * process started again, built by the others): every communicator XLA made before is split
 * again at its first use, where the process that came back splits MPI_COMM_WORLD for the
 * same group (XLA keeps its communicators; the new process makes every one afresh). */
MPIABI_EXPORT void jaccl_mpiabi_came_back(void) {
  atomic_fetch_add(&comebacks, 1);
  mpiabi_split_rounds_restart();  /* with several devices per process: counted as it counts them */
}

/* XLA's communicator `c`, made before a process came back, at its first use since: the split
 * XLA made it with, again (split_of() over MPI_COMM_WORLD with color: the group's first device,
 * key: this rank), with the process that came back splitting for the first time; the group
 * must come out the same, and takes the new split round's number (the communicator's name in
 * the engine, with several devices per process). */
static int split_again(MpiabiComm* c) {
  const unsigned now = atomic_load(&comebacks);
  uintptr_t made = 0;
  if (split_of(world_comm, (int)c->devices[0], c->rank, &made) != MPI_SUCCESS) return last_code;
  MpiabiComm* again = (MpiabiComm*)made;
  const int same = again != NULL && again->size == c->size && again->rank == c->rank &&
                   memcmp(again->devices, c->devices, (size_t)c->size * sizeof(int64_t)) == 0;
  if (same) {
    c->split_round = again->split_round;
    name_comm(c, atomic_load(&engine));
  }
  free(again);
  if (!same) {
    return fail(MPI_ERR_OTHER, "jaccl: XLA's communicator of devices led by device %lld, made "
                "before a process came back, is not the group the processes made again (the "
                "process that came back runs another program?)", (long long)c->devices[0]);
  }
  c->comebacks = now;
  return MPI_SUCCESS;
}

/* Whether XLA's communicator `c` has a device that the world attached lacks. */
static int outside_world(const MpiabiComm* c) {
  for (int i = 0; i < c->size; ++i) {
    if (!in_world(c->devices[i])) return 1;
  }
  return 0;
}

/* XLA runs a collective on `c`, which it made before, where the world failed (a lost process)
 * or may lack c's devices (a world attached since): jaccl builds the next world here, as a
 * jaccl op lowered over a mesh of the live devices would (a program of XLA's collectives
 * alone): the survivors' (renew_after_loss()), or one with the processes that came back (JAX's
 * last live_devices block reported them: jax_jaccl._bootstrap.renew_with_those_back(), why
 * not through jaccl_mpiabi_renew_failed). Fails where the world still lacks c's devices. */
static int world_for_use(MpiabiComm* c) {
  pthread_mutex_lock(&renew_lock);
  int rc = renew_world(outside_world(c));
  if (rc == MPI_SUCCESS && outside_world(c)) {
    rc = fail(MPI_ERR_OTHER, "jaccl: XLA's communicator of devices led by device %lld has "
              "devices outside jaccl's world (their processes were lost and are not live "
              "again): run the program over a mesh of the live devices", (long long)c->devices[0]);
  }
  if (rc == MPI_SUCCESS) c->inside = atomic_load(&attaches);
  pthread_mutex_unlock(&renew_lock);
  return rc;
}

/* The communicator of a collective or transfer XLA runs on `handle` (comm_of()): in a job that
 * recovers, first the world it needs (world_for_use()), then the communicator split again where
 * a process came back since it was made; elsewhere the world never changes (nothing to ask on
 * every call). */
MpiabiComm* comm_in_use(uintptr_t handle) {
  MpiabiComm* c = comm_of(handle);
  if (c == NULL || !c->xla_group || !atomic_load(&recoverable)) return c;
  if ((atomic_load(&engine)->world_failed() || c->inside != atomic_load(&attaches)) &&
      world_for_use(c) != MPI_SUCCESS) {
    return NULL;
  }
  if (c->comebacks != atomic_load(&comebacks) && split_again(c) != MPI_SUCCESS) return NULL;
  return c;
}

