/* The mpiabi library's communicators (mpiabi.h): rank, size, split, dup and free.
 *
 * MPI_Comm_split is an all-gather of (color, key) over the parent; the members of a color, by
 * key, make the new communicator. XLA splits MPI_COMM_WORLD once per group of devices that a
 * collective of its program needs (color: the group's first device, key: the device's rank
 * in it), and the groups of one split are checked whole. With several devices per process the
 * process's devices meet in a split round (split_round.h) and the mpiabi library places members on
 * devices itself (split_world()). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpiabi_values.h"
#include "mpiabi.h"
#include "split_round.h"

MPIABI_EXPORT int MPIABI_Comm_rank(uintptr_t comm, int* rank) {
  if (comm == MPI_COMM_WORLD && atomic_load(&engine) == NULL) {
    *rank = expected_rank;  /* XLA asks right after MPI_Init_thread, for its logs */
    return MPI_SUCCESS;
  }
  MpiabiComm* c = comm_of(comm);
  if (c == NULL) return last_code;
  *rank = c->rank;
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Comm_size(uintptr_t comm, int* size) {
  if (comm == MPI_COMM_WORLD && atomic_load(&engine) == NULL) {
    *size = expected_size;
    return MPI_SUCCESS;
  }
  MpiabiComm* c = comm_of(comm);
  if (c == NULL) return last_code;
  *size = c->size;
  return MPI_SUCCESS;
}

/* A split round's exchange (split_round.h): every process's sorted (color, key) pairs. */
static int exchange_pairs(const int64_t* mine, int64_t* all, void* context, char* error,
                          size_t error_len) {
  const MpiabiComm* processes = context;
  const size_t per_process = (size_t)world_comm->local_devices;
  const int rc = collective(atomic_load(&engine)->kind_all_gather, processes,
                            type_of(MPI_INT64_T), 0, mine, all, 2 * per_process,
                            2 * per_process * (size_t)processes->size);
  if (rc != MPI_SUCCESS) snprintf(error, error_len, "%s", last_message);
  return rc != MPI_SUCCESS;
}

/* The groups of one split of MPI_COMM_WORLD as XLA makes them for one collective: every
 * color's keys are 0..n-1 (XLA's key is the device's rank in its group) with the same n >= 2
 * for all, and key 0 (XLA's color is the group's first device) sits in the process that has
 * that device. Returns why the first group that breaks this does (its color and the members
 * seen in `color`, `members`), or NULL. Two causes: a group's device that never split, its
 * process lost (a mesh over a lost process's devices, after a loss), or, with several devices
 * per process, processes that made communicators for different collectives in one round (XLA
 * caches communicators per process, so a group made earlier on one process, one that lies
 * inside it when two meshes order a process's devices differently, is new on another, whose
 * devices then split alone). A group missing only its last members looks whole where every
 * group misses as many: nothing in the split tells it apart. */
static const char* broken_group(const int64_t* all, int n, int per_process, int64_t* color,
                                int* members) {
  const JacclMpiEngine* e = atomic_load(&engine);
  unsigned char* seen = malloc((size_t)n);
  if (seen == NULL) return "out of memory";
  const char* why = NULL;
  int size = -1;
  for (int j = 0; why == NULL && j < n; ++j) {
    *color = all[2 * j];
    int first = *color != MPI_UNDEFINED;  /* each color once, at its first place */
    for (int i = 0; first && i < j; ++i) first = all[2 * i] != *color;
    if (!first) continue;
    int key0 = -1, contiguous = 1;
    *members = 0;
    memset(seen, 0, (size_t)n);
    for (int i = 0; i < n; ++i) {
      if (all[2 * i] != *color) continue;
      const int64_t key = all[2 * i + 1];
      ++*members;
      if (key == 0) key0 = i;
      if (key < 0 || key >= n || seen[key]) contiguous = 0;
      else seen[key] = 1;
    }
    for (int k = 0; contiguous && k < *members; ++k) contiguous = seen[k];
    int home = -1;  /* the process of device `color` */
    for (int i = 0; i < n; ++i) {
      if (e->devices[i] == *color) home = i / per_process;
    }
    if (!contiguous) why = "its ranks are not 0..n-1";
    else if (*members < 2 && per_process > 1) why = "it has one device";
    else if (size >= 0 && *members != size) why = "other groups of the split have another size";
    else if (key0 < 0 || home != key0 / per_process) why = "its first device is elsewhere";
    size = *members;
  }
  free(seen);
  return why;
}

/* Fails a split whose groups broken_group() refused, saying which of its causes is likely. */
static int refuse_split(int64_t color, int members, const char* why) {
  const JacclMpiEngine* e = atomic_load(&engine);
  if (lacks_processes()) {
    return fail(MPI_ERR_OTHER, "jaccl: XLA's group of devices led by device %lld is not whole "
                "(%d members split: %s): it has devices of no process of jaccl's world (a mesh "
                "over a lost process's devices): run the program over a mesh of the live "
                "devices (multihost_utils.live_devices)", (long long)color, members, why);
  }
  if (e->devices_per_process > 1) {
    return fail(MPI_ERR_OTHER, "jaccl: MPI_Comm_split: the processes made communicators for "
                "different collectives at once (group of device %lld, %d members seen: %s). "
                "With several CPU devices per process, every collective must find its groups "
                "new on all processes or on none; XLA caches communicators per process, which "
                "breaks this when meshes order a process's devices differently. Keep such "
                "programs on gloo (jaccl-run --xla-collectives gloo)",
                (long long)color, members, why);
  }
  return fail(MPI_ERR_OTHER, "jaccl: MPI_Comm_split: the processes made communicators for "
              "different groups at once (group of device %lld, %d members seen: %s): do they "
              "run one program?", (long long)color, members, why);
}

/* The end of every split: the communicator of `color` out of the (color, key) of each of the
 * parent's n places, `all`: the places of that color by key (ties by place), their devices,
 * the caller's rank where its place `me` lands, and the split round that made it, `round`.
 * MPI_COMM_NULL (0) for MPI_UNDEFINED. */
static int comm_of_color(const MpiabiComm* parent, const int64_t* all, int color, int me,
                         uint64_t round, uintptr_t* newcomm) {
  *newcomm = 0;
  if (color == MPI_UNDEFINED) return MPI_SUCCESS;
  const int n = parent->size;
  int* order = malloc((size_t)n * sizeof(int));
  if (order == NULL) return fail(MPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  int members = 0;
  for (int j = 0; j < n; ++j) {
    if (all[2 * j] != color) continue;
    int at = members++;  /* insertion by (key, place): stable */
    while (at > 0 && all[2 * order[at - 1] + 1] > all[2 * j + 1]) {
      order[at] = order[at - 1];
      --at;
    }
    order[at] = j;
  }
  MpiabiComm* c = new_comm(0, members);
  if (c == NULL) {
    free(order);
    return fail(MPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  }
  for (int i = 0; i < members; ++i) {
    c->devices[i] = parent->devices[order[i]];
    if (order[i] == me) c->rank = i;
  }
  c->split_round = round;
  name_comm(c, atomic_load(&engine));
  *newcomm = (uintptr_t)c;
  free(order);
  return MPI_SUCCESS;
}

/* MPI_COMM_WORLD with several devices per process: this process's devices meet in a split
 * round; each caller is given the device at its pair's place among the process's (so one
 * communicator never has a device twice), and the communicator of its color is everyone of
 * that color by key, made in that round: an equal table made in another round, whose
 * devices may stand for other XLA devices, is another communicator. */
static int split_world(const MpiabiComm* world, int color, int key, uintptr_t* newcomm) {
  const JacclMpiEngine* e = atomic_load(&engine);
  const int per_process = world->local_devices, n = world->size;
  int64_t* all = malloc(2 * (size_t)n * sizeof(int64_t));
  if (all == NULL) return fail(MPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  int slot = 0, rc = MPI_SUCCESS, members = 0;
  int64_t color_seen = 0;
  const char* broken = NULL;
  uint64_t round = 0;
  char error[kMessageBytes];
  *newcomm = 0;
  if (mpiabi_split_round(per_process, e->num_processes, e->timeout_s, color, key, exchange_pairs,
                       processes_comm, all, &slot, &round, error, sizeof error) != 0) {
    e->raise_abort(error);  /* the other processes stop too */
    rc = fail(MPI_ERR_OTHER, "%s", error);
  } else if ((broken = broken_group(all, n, per_process, &color_seen, &members)) != NULL) {
    /* every process finds the same from the same round; processes at odds also stop (a loss
     * leaves the survivors' world whole: the program may go on over the live devices) */
    rc = refuse_split(color_seen, members, broken);
    if (!lacks_processes()) e->raise_abort(last_message);
  } else {
    rc = comm_of_color(world, all, color, e->my_process * per_process + slot, round, newcomm);
    if (rc == MPI_SUCCESS && *newcomm != 0) ((MpiabiComm*)*newcomm)->xla_group = 1;
    if (rc == MPI_SUCCESS) rc = check_after_loss(newcomm, round);
  }
  free(all);
  if (rc != MPI_SUCCESS) remember_split_failure();
  return rc;
}


/* Collective over `comm`: everyone's (color, key) goes to everyone; the ranks of my color, by
 * key (ties by their rank in `comm`), make the new communicator (split_of()). */
MPIABI_EXPORT int MPIABI_Comm_split(uintptr_t comm, int color, int key, uintptr_t* newcomm) {
  if (comm == MPI_COMM_WORLD && world_for_split() != MPI_SUCCESS) {
    *newcomm = 0;
    remember_split_failure();
    return last_code;
  }
  if (comm == MPI_COMM_WORLD && color != MPI_UNDEFINED && !in_world(color)) {
    /* XLA's color is the group's first device: a group of devices the world lacks (a mesh
     * over a lost process's devices) would otherwise be split without them */
    *newcomm = 0;
    fail(MPI_ERR_OTHER, "jaccl: XLA makes the communicator of a group led by device %d, "
         "which belongs to no process of jaccl's world (a lost process): run the program over "
         "a mesh of the live devices (multihost_utils.live_devices)", color);
    remember_split_failure();
    return last_code;
  }
  MpiabiComm* parent = comm_of(comm);
  if (parent == NULL) return last_code;
  return split_of(parent, color, key, newcomm);
}

/* MPI_Comm_split's work once the world is the one to split: with several devices per process,
 * a split round (split_world()); else everyone's (color, key) to everyone over `parent`, the
 * ranks of my color, by key (ties by their rank in `parent`), making the new communicator (one
 * of MPI_COMM_WORLD: XLA's group). */
int split_of(const MpiabiComm* parent, int color, int key, uintptr_t* newcomm) {
  if (parent->local_devices > 1) return split_world(parent, color, key, newcomm);
  const int n = parent->size;
  int64_t mine[2] = {color, key}, color_seen = 0;
  int members = 0;
  const char* broken = NULL;
  int64_t* all = malloc(2 * (size_t)n * sizeof(int64_t));
  if (all == NULL) return fail(MPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  int rc = collective_at(atomic_load(&engine)->kind_all_gather, parent, type_of(MPI_INT64_T), 0,
                         mine, all, 2, 2 * (size_t)n, kJacclMpiabiSplitSite);
  *newcomm = 0;
  if (rc != MPI_SUCCESS) {
    char why[kMessageBytes];
    snprintf(why, sizeof why, "%s", last_message);
    rc = fail(rc, "jaccl: MPI_Comm_split (XLA making the communicator of its group of devices "
              "led by device %d) failed (XLA makes a group's communicator when a process first "
              "needs it: if other processes had this one already, its devices listed in another "
              "order before, list them in one order or use --xla-collectives gloo: "
              "docs/xla-collectives.md): %s", color, why);
  } else if (parent == world_comm &&
             (broken = broken_group(all, n, 1, &color_seen, &members)) != NULL) {
    rc = refuse_split(color_seen, members, broken);  /* every process finds the same */
  } else {
    rc = comm_of_color(parent, all, color, parent->rank, parent->split_round, newcomm);
    if (rc == MPI_SUCCESS && *newcomm != 0 && parent == world_comm) {
      ((MpiabiComm*)*newcomm)->xla_group = 1;
      rc = check_after_loss(newcomm, 0);
    }
  }
  free(all);
  if (rc != MPI_SUCCESS) remember_split_failure();
  return rc;
}


MPIABI_EXPORT int MPIABI_Comm_dup(uintptr_t comm, uintptr_t* newcomm) {
  MpiabiComm* c = comm_of(comm);
  if (c == NULL) return last_code;
  MpiabiComm* d = new_comm(c->rank, c->size);
  if (d == NULL) return fail(MPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_dup");
  memcpy(d->devices, c->devices, (size_t)c->size * sizeof(int64_t));
  d->local_devices = c->local_devices;
  d->split_round = c->split_round;
  d->id = c->id;
  *newcomm = (uintptr_t)d;
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Comm_free(uintptr_t* comm) {
  if (*comm != MPI_COMM_WORLD && *comm != MPI_COMM_SELF && *comm != 0) {
    MpiabiComm* c = (MpiabiComm*)*comm;
    if (*comm < 0x10000 || c->magic != kCommMagic) {
      return fail(MPI_ERR_COMM, "jaccl: MPI_Comm_free of %#lx, not a communicator",
                  (unsigned long)*comm);
    }
    c->magic = 0;
    free(c);
  }
  *comm = 0;
  return MPI_SUCCESS;
}

