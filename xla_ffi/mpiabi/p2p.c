/* The mpiabi library's point-to-point calls (mpiabi.h): Sendrecv, and Isend/Irecv, which only
 * queue: the first Wait on a thread runs everything that thread queued on the communicator in
 * one point-to-point call of the engine, sends and receives together, which is how XLA's
 * collective-permute posts them. */
#include <stdlib.h>
#include <string.h>

#include "mpiabi_values.h"
#include "mpiabi.h"

typedef struct MpiabiStatus {  /* MPItrampoline's MPIABI_Status: 24 opaque bytes, then these */
  unsigned char opaque[24];
  int source, tag, error, reserved;
} MpiabiStatus;

static void set_status(void* status, int source, int tag) {
  if (status == NULL || status == MPI_STATUS_IGNORE) return;
  MpiabiStatus* s = status;
  s->source = source;
  s->tag = tag;
  s->error = MPI_SUCCESS;
}

/* Runs sends and receives of this thread together; peers are ranks of `c`. */
static int transfer(const MpiabiComm* c, const struct JacclTransfer* sends, size_t num_sends,
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
    return fail(MPI_ERR_OTHER, "%s", error);
  }
  return MPI_SUCCESS;
}

static int bytes_of(const char* name, uintptr_t datatype, int count, uint64_t* bytes) {
  const MpiabiType* type = type_of(datatype);
  if (type == NULL) return last_code;
  if (count < 0) return refuse_wrapped_count(name, count);
  *bytes = (uint64_t)count * (uint64_t)type->size;
  return MPI_SUCCESS;
}

static int check_peer(const MpiabiComm* c, int peer, const char* what) {
  if (peer == MPI_PROC_NULL || (peer >= 0 && peer < c->size)) return MPI_SUCCESS;
  return fail(MPI_ERR_RANK, "jaccl: %s rank %d in a communicator of %d (MPI_ANY_SOURCE is not "
              "supported)", what, peer, c->size);
}

MPIABI_EXPORT int MPIABI_Sendrecv(const void* send, int send_count, uintptr_t send_type, int dest,
                                int send_tag, void* recv, int recv_count, uintptr_t recv_type,
                                int source, int recv_tag, uintptr_t comm, void* status) {
  atomic_fetch_add(&served, 1);
  MpiabiComm* c = comm_in_use(comm);
  uint64_t send_bytes = 0, recv_bytes = 0;  /* set by bytes_of when it succeeds */
  if (c == NULL || bytes_of("MPI_Sendrecv", send_type, send_count, &send_bytes) != MPI_SUCCESS ||
      bytes_of("MPI_Sendrecv", recv_type, recv_count, &recv_bytes) != MPI_SUCCESS ||
      check_peer(c, dest, "MPI_Sendrecv to") != MPI_SUCCESS ||
      check_peer(c, source, "MPI_Sendrecv from") != MPI_SUCCESS) {
    return last_code;
  }
  if (dest == c->rank || source == c->rank) {
    if (dest != source || send_bytes != recv_bytes) {
      return fail(MPI_ERR_ARG, "jaccl: MPI_Sendrecv to rank %d from rank %d on rank %d: a "
                  "message to itself needs the same rank and size both ways", dest, source,
                  c->rank);
    }
    memmove(recv, send, send_bytes);
    set_status(status, source, send_tag);
    return MPI_SUCCESS;
  }
  struct JacclTransfer s = {dest, (void*)send, send_bytes};
  struct JacclTransfer r = {source, recv, recv_bytes};
  int rc = transfer(c, &s, dest == MPI_PROC_NULL ? 0 : 1, &r, source == MPI_PROC_NULL ? 0 : 1);
  if (rc == MPI_SUCCESS) set_status(status, source, recv_tag);
  return rc;
}

/* A queued Isend or Irecv; the thread's queue runs at its first Wait. */
typedef struct MpiabiRequest {
  uint32_t magic;
  int is_send, peer, tag, done, code;
  const MpiabiComm* comm;
  struct JacclTransfer transfer;
  struct MpiabiRequest* next;  /* this thread's queue */
} MpiabiRequest;

static __thread MpiabiRequest* queue;

static int post(int is_send, void* buf, int count, uintptr_t datatype, int peer, int tag,
                uintptr_t comm, uintptr_t* request) {
  atomic_fetch_add(&served, 1);
  MpiabiComm* c = comm_in_use(comm);
  uint64_t bytes = 0;  /* set by bytes_of when it succeeds */
  const char* name = is_send ? "MPI_Isend" : "MPI_Irecv";
  if (c == NULL || bytes_of(name, datatype, count, &bytes) != MPI_SUCCESS ||
      check_peer(c, peer, is_send ? "MPI_Isend to" : "MPI_Irecv from") != MPI_SUCCESS) {
    return last_code;
  }
  if (peer == c->rank) {
    return fail(MPI_ERR_RANK, "jaccl: MPI_I%s to itself (rank %d) is not supported",
                is_send ? "send" : "recv", peer);
  }
  MpiabiRequest* r = calloc(1, sizeof *r);
  if (r == NULL) return fail(MPI_ERR_NO_MEM, "jaccl: out of memory in a point-to-point call");
  r->magic = kRequestMagic;
  r->is_send = is_send;
  r->peer = peer;
  r->tag = tag;
  r->comm = c;
  r->transfer = (struct JacclTransfer){peer, buf, bytes};
  r->done = peer == MPI_PROC_NULL;
  if (!r->done) {  /* append: transfers keep their posting order */
    MpiabiRequest** tail = &queue;
    while (*tail != NULL) tail = &(*tail)->next;
    *tail = r;
  }
  *request = (uintptr_t)r;
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Isend(const void* buf, int count, uintptr_t datatype, int dest, int tag,
                             uintptr_t comm, uintptr_t* request) {
  return post(1, (void*)buf, count, datatype, dest, tag, comm, request);
}

MPIABI_EXPORT int MPIABI_Irecv(void* buf, int count, uintptr_t datatype, int source, int tag,
                             uintptr_t comm, uintptr_t* request) {
  return post(0, buf, count, datatype, source, tag, comm, request);
}

/* Runs every queued request of this thread on `comm` in one point-to-point call. */
static void run_queue(const MpiabiComm* comm) {
  size_t n = 0;
  for (MpiabiRequest* r = queue; r != NULL; r = r->next) n += r->comm == comm;
  struct JacclTransfer* sends = malloc((n + 1) * sizeof *sends);
  struct JacclTransfer* receives = malloc((n + 1) * sizeof *receives);
  size_t num_sends = 0, num_receives = 0;
  int code = MPI_ERR_NO_MEM;
  if (sends != NULL && receives != NULL) {
    for (MpiabiRequest* r = queue; r != NULL; r = r->next) {
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
  for (MpiabiRequest** at = &queue; *at != NULL;) {
    MpiabiRequest* r = *at;
    if (r->comm != comm) {
      at = &r->next;
      continue;
    }
    r->done = 1;
    r->code = code;
    *at = r->next;
  }
}

MPIABI_EXPORT int MPIABI_Wait(uintptr_t* request, void* status) {
  if (*request == 0) return MPI_SUCCESS;
  MpiabiRequest* r = (MpiabiRequest*)*request;
  if (*request < 0x10000 || r->magic != kRequestMagic) {
    return fail(MPI_ERR_REQUEST, "jaccl: MPI_Wait on %#lx, not a request", (unsigned long)*request);
  }
  if (!r->done) run_queue(r->comm);
  const int code = r->code;
  if (code == MPI_SUCCESS && !r->is_send) set_status(status, r->peer, r->tag);
  r->magic = 0;
  free(r);
  *request = 0;
  return code == MPI_SUCCESS ? MPI_SUCCESS : (last_code = code);
}

MPIABI_EXPORT int MPIABI_Waitall(int count, uintptr_t requests[], void* statuses) {
  int rc = MPI_SUCCESS;
  for (int i = 0; i < count; ++i) {
    void* status = (statuses == NULL || statuses == MPI_STATUSES_IGNORE)
                       ? MPI_STATUS_IGNORE : (char*)statuses + (size_t)i * sizeof(MpiabiStatus);
    const int code = MPIABI_Wait(&requests[i], status);
    if (rc == MPI_SUCCESS) rc = code;
  }
  return rc;
}

