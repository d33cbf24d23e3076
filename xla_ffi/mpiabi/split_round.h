/* Where one process's devices meet to split MPI_COMM_WORLD when the process has several.
 *
 * XLA:CPU makes a communicator for each device, lazily, on whichever thread runs its first
 * collective on a new group: MPI_Comm_split(MPI_COMM_WORLD, color = the group's first device,
 * key = the device's rank in it). With several devices per process the mpiabi library sees several
 * such calls per process and cannot tell which device makes which. A split round gathers all of
 * them (every device of every process takes part, as every rank does in MPI), runs one
 * exchange with the other processes, and gives each caller the whole picture.
 *
 * Contract: mpiabi_split_round() is called by each of this process's `devices` devices once per
 * round, from any threads. The last to arrive calls exchange(mine, all, context): `mine` is the
 * round's 2 * devices (color, key) pairs of this process, sorted; exchange fills `all` with
 * every process's, process by process (2 * devices * processes values), and returns 0 or
 * non-zero with its message in `error`. Every caller then gets a copy of `all`, its `slot` (the
 * position of its own pair in its process's sorted list: which of the process's devices it is
 * given) and the round's number (1, 2, ...), or the failure: the exchange's, or a timeout when
 * fewer than `devices` calls arrive within timeout_s (a device that makes a communicator when
 * the others do not). Returns 0 on success. mpiabi_split_rounds_restart() numbers the rounds from
 * 1 again (a process that came back starts there: the others restart with it), between rounds. */
#ifndef JACCL_MPIABI_SPLIT_ROUND_H
#define JACCL_MPIABI_SPLIT_ROUND_H

#include <stddef.h>
#include <stdint.h>

typedef int (*MpiabiExchange)(const int64_t* mine, int64_t* all, void* context, char* error,
                            size_t error_len);

int mpiabi_split_round(int devices, int processes, double timeout_s, int color, int key,
                     MpiabiExchange exchange, void* context, int64_t* all, int* slot,
                     uint64_t* round, char* error, size_t error_len);
void mpiabi_split_rounds_restart(void);

#endif
