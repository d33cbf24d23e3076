/* The MPI shim's point-to-point calls (shim_shared.h): Sendrecv, and Isend/Irecv, which only
 * queue: the first Wait on a thread runs everything that thread queued on the communicator in
 * one point-to-point call of the engine, sends and receives together, which is how XLA's
 * collective-permute posts them. */
#include <stdlib.h>
#include <string.h>

#include "mpiabi_values.h"
#include "shim_shared.h"

typedef struct JmpiStatus {  /* MPItrampoline's MPIABI_Status: 24 opaque bytes, then these */
  unsigned char opaque[24];
  int source, tag, error, reserved;
} JmpiStatus;

static void set_status(void* status, int source, int tag) {
  if (status == NULL || status == JMPI_STATUS_IGNORE) return;
  JmpiStatus* s = status;
  s->source = source;
  s->tag = tag;
  s->error = JMPI_SUCCESS;
}

/* Runs sends and receives of this thread together; peers are ranks of `c`. */
static int transfer(const JmpiComm* c, const struct JacclTransfer* sends, size_t num_sends,
                    const struct JacclTransfer* receives, size_t num_receives) {
  if (c->local_devices > 1) return refuse_world(c);
  JacclHostP2p call;
  memset(&call, 0, sizeof call);
  call.address = address_on(c);
  call.sends = sends;
  call.num_sends = num_sends;
  call.receives = receives;
  call.num_receives = num_receives;
  char error[kMessageBytes];
  if (atomic_load(&engine)->run_p2p(&call, error, sizeof error) != 0) {
    return fail(JMPI_ERR_OTHER, "%s", error);
  }
  return JMPI_SUCCESS;
}

static int bytes_of(const char* name, uintptr_t datatype, int count, uint64_t* bytes) {
  const JmpiType* type = type_of(datatype);
  if (type == NULL) return last_code;
  if (count < 0) return refuse_wrapped_count(name, count);
  *bytes = (uint64_t)count * (uint64_t)type->size;
  return JMPI_SUCCESS;
}

static int check_peer(const JmpiComm* c, int peer, const char* what) {
  if (peer == JMPI_PROC_NULL || (peer >= 0 && peer < c->size)) return JMPI_SUCCESS;
  return fail(JMPI_ERR_RANK, "jaccl: %s rank %d in a communicator of %d (MPI_ANY_SOURCE is not "
              "supported)", what, peer, c->size);
}

JMPI_EXPORT int MPIABI_Sendrecv(const void* send, int send_count, uintptr_t send_type, int dest,
                                int send_tag, void* recv, int recv_count, uintptr_t recv_type,
                                int source, int recv_tag, uintptr_t comm, void* status) {
  atomic_fetch_add(&served, 1);
  JmpiComm* c = comm_in_use(comm);
  uint64_t send_bytes = 0, recv_bytes = 0;  /* set by bytes_of when it succeeds */
  if (c == NULL || bytes_of("MPI_Sendrecv", send_type, send_count, &send_bytes) != JMPI_SUCCESS ||
      bytes_of("MPI_Sendrecv", recv_type, recv_count, &recv_bytes) != JMPI_SUCCESS ||
      check_peer(c, dest, "MPI_Sendrecv to") != JMPI_SUCCESS ||
      check_peer(c, source, "MPI_Sendrecv from") != JMPI_SUCCESS) {
    return last_code;
  }
  if (dest == c->rank || source == c->rank) {
    if (dest != source || send_bytes != recv_bytes) {
      return fail(JMPI_ERR_ARG, "jaccl: MPI_Sendrecv to rank %d from rank %d on rank %d: a "
                  "message to itself needs the same rank and size both ways", dest, source,
                  c->rank);
    }
    memmove(recv, send, send_bytes);
    set_status(status, source, send_tag);
    return JMPI_SUCCESS;
  }
  struct JacclTransfer s = {dest, (void*)send, send_bytes};
  struct JacclTransfer r = {source, recv, recv_bytes};
  int rc = transfer(c, &s, dest == JMPI_PROC_NULL ? 0 : 1, &r, source == JMPI_PROC_NULL ? 0 : 1);
  if (rc == JMPI_SUCCESS) set_status(status, source, recv_tag);
  return rc;
}

/* A queued Isend or Irecv; the thread's queue runs at its first Wait. */
typedef struct JmpiRequest {
  uint32_t magic;
  int is_send, peer, tag, done, code;
  const JmpiComm* comm;
  struct JacclTransfer transfer;
  struct JmpiRequest* next;  /* this thread's queue */
} JmpiRequest;

static __thread JmpiRequest* queue;

static int post(int is_send, void* buf, int count, uintptr_t datatype, int peer, int tag,
                uintptr_t comm, uintptr_t* request) {
  atomic_fetch_add(&served, 1);
  JmpiComm* c = comm_in_use(comm);
  uint64_t bytes = 0;  /* set by bytes_of when it succeeds */
  const char* name = is_send ? "MPI_Isend" : "MPI_Irecv";
  if (c == NULL || bytes_of(name, datatype, count, &bytes) != JMPI_SUCCESS ||
      check_peer(c, peer, is_send ? "MPI_Isend to" : "MPI_Irecv from") != JMPI_SUCCESS) {
    return last_code;
  }
  if (peer == c->rank) {
    return fail(JMPI_ERR_RANK, "jaccl: MPI_I%s to itself (rank %d) is not supported",
                is_send ? "send" : "recv", peer);
  }
  JmpiRequest* r = calloc(1, sizeof *r);
  if (r == NULL) return fail(JMPI_ERR_NO_MEM, "jaccl: out of memory in a point-to-point call");
  r->magic = kRequestMagic;
  r->is_send = is_send;
  r->peer = peer;
  r->tag = tag;
  r->comm = c;
  r->transfer = (struct JacclTransfer){peer, buf, bytes};
  r->done = peer == JMPI_PROC_NULL;
  if (!r->done) {  /* append: transfers keep their posting order */
    JmpiRequest** tail = &queue;
    while (*tail != NULL) tail = &(*tail)->next;
    *tail = r;
  }
  *request = (uintptr_t)r;
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Isend(const void* buf, int count, uintptr_t datatype, int dest, int tag,
                             uintptr_t comm, uintptr_t* request) {
  return post(1, (void*)buf, count, datatype, dest, tag, comm, request);
}

JMPI_EXPORT int MPIABI_Irecv(void* buf, int count, uintptr_t datatype, int source, int tag,
                             uintptr_t comm, uintptr_t* request) {
  return post(0, buf, count, datatype, source, tag, comm, request);
}

/* Runs every queued request of this thread on `comm` in one point-to-point call. */
static void run_queue(const JmpiComm* comm) {
  size_t n = 0;
  for (JmpiRequest* r = queue; r != NULL; r = r->next) n += r->comm == comm;
  struct JacclTransfer* sends = malloc((n + 1) * sizeof *sends);
  struct JacclTransfer* receives = malloc((n + 1) * sizeof *receives);
  size_t num_sends = 0, num_receives = 0;
  int code = JMPI_ERR_NO_MEM;
  if (sends != NULL && receives != NULL) {
    for (JmpiRequest* r = queue; r != NULL; r = r->next) {
      if (r->comm != comm) continue;
      if (r->is_send) sends[num_sends++] = r->transfer;
      else receives[num_receives++] = r->transfer;
    }
    code = transfer(comm, sends, num_sends, receives, num_receives);
  } else {
    fail(code, "jaccl: out of memory in MPI_Wait");
  }
  free(sends);
  free(receives);
  for (JmpiRequest** at = &queue; *at != NULL;) {
    JmpiRequest* r = *at;
    if (r->comm != comm) {
      at = &r->next;
      continue;
    }
    r->done = 1;
    r->code = code;
    *at = r->next;
  }
}

JMPI_EXPORT int MPIABI_Wait(uintptr_t* request, void* status) {
  if (*request == 0) return JMPI_SUCCESS;
  JmpiRequest* r = (JmpiRequest*)*request;
  if (*request < 0x10000 || r->magic != kRequestMagic) {
    return fail(JMPI_ERR_REQUEST, "jaccl: MPI_Wait on %#lx, not a request", (unsigned long)*request);
  }
  if (!r->done) run_queue(r->comm);
  const int code = r->code;
  if (code == JMPI_SUCCESS && !r->is_send) set_status(status, r->peer, r->tag);
  r->magic = 0;
  free(r);
  *request = 0;
  return code == JMPI_SUCCESS ? JMPI_SUCCESS : (last_code = code);
}

JMPI_EXPORT int MPIABI_Waitall(int count, uintptr_t requests[], void* statuses) {
  int rc = JMPI_SUCCESS;
  for (int i = 0; i < count; ++i) {
    void* status = (statuses == NULL || statuses == JMPI_STATUSES_IGNORE)
                       ? JMPI_STATUS_IGNORE : (char*)statuses + (size_t)i * sizeof(JmpiStatus);
    const int code = MPIABI_Wait(&requests[i], status);
    if (rc == JMPI_SUCCESS) rc = code;
  }
  return rc;
}

