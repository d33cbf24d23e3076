/* A split round (split_round.h): callers gather under one lock; the last one runs the exchange
 * with the lock released (the others sleep on the condition meanwhile); then each takes its
 * copy, and the round is over when the last has. A round that times out breaks the meeting for
 * good: the job has lost a device's place in the order, every later split fails at once. */
#include "split_round.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static struct {
  int arrived;      /* callers of the round being gathered */
  int leaving;      /* callers of the finished round yet to take their copy */
  uint64_t round;   /* rounds finished */
  int64_t* pairs;   /* (color, key) by arrival */
  int* slot_of;     /* by arrival: position among the sorted pairs */
  int64_t* all;     /* the finished round's exchange */
  int capacity;     /* devices the arrays hold; `all` holds capacity * `processes` pairs */
  int processes;
  int failed;       /* the finished round's exchange failed: `message` */
  int broken;       /* a round timed out: `message`, for every later call */
  char message[1024];
} meeting;

static void init_condition(void) {
  pthread_condattr_t attributes;
  pthread_condattr_init(&attributes);
  pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
  pthread_cond_init(&changed, &attributes);
  pthread_condattr_destroy(&attributes);
}

static struct timespec deadline_after(double seconds) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  const long long ns = (long long)(seconds * 1e9) + t.tv_nsec;
  t.tv_sec += (time_t)(ns / 1000000000LL);
  t.tv_nsec = (long)(ns % 1000000000LL);
  return t;
}

static int grow(int devices, int processes) {
  if (meeting.capacity >= devices && meeting.processes >= processes) return 0;
  int64_t* pairs = realloc(meeting.pairs, 2 * (size_t)devices * sizeof(int64_t));
  if (pairs != NULL) meeting.pairs = pairs;
  int* slots = realloc(meeting.slot_of, (size_t)devices * sizeof(int));
  if (slots != NULL) meeting.slot_of = slots;
  int64_t* all = realloc(meeting.all, 2 * (size_t)devices * (size_t)processes * sizeof(int64_t));
  if (all != NULL) meeting.all = all;
  if (pairs == NULL || slots == NULL || all == NULL) return 1;
  meeting.capacity = devices;
  meeting.processes = processes;
  return 0;
}

void mpiabi_split_rounds_restart(void) {
  pthread_mutex_lock(&lock);
  meeting.round = 0;
  pthread_mutex_unlock(&lock);
}

static int before(int a, int b) {  /* arrival a's pair sorts before arrival b's */
  const int64_t* p = meeting.pairs;
  if (p[2 * a] != p[2 * b]) return p[2 * a] < p[2 * b];
  if (p[2 * a + 1] != p[2 * b + 1]) return p[2 * a + 1] < p[2 * b + 1];
  return a < b;
}

/* The last caller: sorts the round's pairs, exchanges them, opens the round's results. */
static void finish_round(int devices, MpiabiExchange exchange, void* context) {
  int order[devices];
  int64_t mine[2 * devices];
  for (int i = 0; i < devices; ++i) {
    int at = i;  /* insertion sort: a handful of devices */
    while (at > 0 && before(i, order[at - 1])) {
      order[at] = order[at - 1];
      --at;
    }
    order[at] = i;
  }
  for (int k = 0; k < devices; ++k) {
    meeting.slot_of[order[k]] = k;
    mine[2 * k] = meeting.pairs[2 * order[k]];
    mine[2 * k + 1] = meeting.pairs[2 * order[k] + 1];
  }
  char error[sizeof meeting.message] = {0};
  pthread_mutex_unlock(&lock);
  const int rc = exchange(mine, meeting.all, context, error, sizeof error);
  pthread_mutex_lock(&lock);
  meeting.failed = rc != 0;
  if (rc != 0) snprintf(meeting.message, sizeof meeting.message, "%s", error);
  meeting.round += 1;
  meeting.leaving = devices;
  meeting.arrived = 0;
  pthread_cond_broadcast(&changed);
}

static int give_up(char* error, size_t error_len, const char* format, int have, int devices,
                   double timeout_s) {
  snprintf(meeting.message, sizeof meeting.message, format, have, devices, timeout_s);
  meeting.broken = 1;
  pthread_cond_broadcast(&changed);
  snprintf(error, error_len, "%s", meeting.message);
  pthread_mutex_unlock(&lock);
  return 1;
}

int mpiabi_split_round(int devices, int processes, double timeout_s, int color, int key,
                     MpiabiExchange exchange, void* context, int64_t* all, int* slot,
                     uint64_t* round, char* error, size_t error_len) {
  pthread_once(&once, init_condition);
  const struct timespec deadline = deadline_after(timeout_s);
  pthread_mutex_lock(&lock);
  while (!meeting.broken && meeting.leaving > 0) {  /* the last round's callers still reading */
    if (pthread_cond_timedwait(&changed, &lock, &deadline) != 0 && meeting.leaving > 0) break;
  }
  if (meeting.broken) {
    snprintf(error, error_len, "%s", meeting.message);
    pthread_mutex_unlock(&lock);
    return 1;
  }
  if (meeting.leaving > 0 || (meeting.arrived == 0 && grow(devices, processes) != 0)) {
    return give_up(error, error_len, "jaccl: MPI_Comm_split: the previous round did not end "
                   "(%d of %d devices still in it) within %g s", meeting.leaving, devices,
                   timeout_s);
  }
  const int me = meeting.arrived++;
  const uint64_t my_round = meeting.round + 1;
  meeting.pairs[2 * me] = color;
  meeting.pairs[2 * me + 1] = key;
  if (meeting.arrived == devices) {
    finish_round(devices, exchange, context);
  } else {
    while (!meeting.broken && meeting.round < my_round) {
      if (meeting.arrived == devices) {  /* all here: the exchange has its own deadline */
        pthread_cond_wait(&changed, &lock);
      } else if (pthread_cond_timedwait(&changed, &lock, &deadline) != 0 &&
                 meeting.round < my_round && meeting.arrived < devices && !meeting.broken) {
        return give_up(error, error_len, "jaccl: MPI_Comm_split: %d of this process's %d CPU "
                       "devices made a new communicator within %g s (JACCL_TIMEOUT); with "
                       "several devices per process, XLA's collectives need every device to "
                       "start a new group at the same point", meeting.arrived, devices,
                       timeout_s);
      }
    }
    if (meeting.broken) {
      snprintf(error, error_len, "%s", meeting.message);
      pthread_mutex_unlock(&lock);
      return 1;
    }
  }
  int rc = 0;
  if (meeting.failed) {
    snprintf(error, error_len, "%s", meeting.message);
    rc = 1;
  } else {
    memcpy(all, meeting.all, 2 * (size_t)devices * (size_t)processes * sizeof(int64_t));
    *slot = meeting.slot_of[me];
    *round = my_round;
  }
  if (--meeting.leaving == 0) pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
  return rc;
}
