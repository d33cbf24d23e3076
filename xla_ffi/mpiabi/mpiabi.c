/* libjaccl_mpiabi.so: the MPI calls XLA:CPU's 'mpi' collectives make, carried by jaccl's engine.
 *
 * jaxlib links MPItrampoline, which at `import jax` loads the library MPITRAMPOLINE_LIB names and
 * resolves 641 symbols in it (abi_symbols.txt; mpiabi_exports.c defines the constants and a stub
 * for every function). This file and its neighbours implement what XLA calls
 * (docs/xla-collectives.md, "How it works"): here Init_thread, Finalize, Is_thread_main,
 * Allreduce, Allgather, Reduce_scatter(_block), Barrier, Error_string and the small helpers
 * around them; Comm_rank/size/split/dup/free in comms.c; Sendrecv, Isend/Irecv/Wait(all) in
 * p2p.c; what changes after a lost process in recovery.c (mpiabi.h: what they share). It
 * holds no engine: _jaccl attaches its own through jaccl_mpiabi_attach() once the world is up
 * (abi/mpiabi_table.h), so a process has one engine; in a program that never started jaccl,
 * XLA's first collective starts it (attached()).
 *
 * Communicators are tables of global device ids, the same tables jaccl's own ops use, so the
 * engine finds the same groups and channels; its calls are numbered in a sequence space of their
 * own (kJacclXlaCollectives), so a rank that takes a jaccl op where its peer takes an XLA
 * collective gets "ranks disagree", never the peer's data. A failure returns an MPI error code
 * and keeps jaccl's message for MPI_Error_string (XLA puts it in the JAX exception).
 * Thread-safe: XLA calls from any of its worker threads. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpiabi_values.h"
#include "mpiabi.h"
#include "mpiabi.h"

/* ---- errors: the last failure of this thread, for MPI_Error_string ---- */

__thread char last_message[kMessageBytes];
__thread int last_code;

int fail(int code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_message, sizeof last_message, format, args);
  va_end(args);
  last_code = code;
  return code;
}

void mpiabi_unsupported(const char* function) {
  fail(MPI_ERR_UNSUPPORTED_OPERATION,
       "jaccl: %s is not supported by jaccl's mpiabi library (it implements the calls XLA:CPU's "
       "collectives make)", function);
}

/* ---- the engine and the world ---- */

const JacclMpiEngine* _Atomic engine;
int expected_rank = 0, expected_size = 1;  /* WORLD's answers before the attach */
static atomic_int initialized, finalized;

/* Processes that came back (started again) into this process's world so far:
 * jaccl_mpiabi_came_back(); worlds attached so far (jaccl_mpiabi_attach()). */
atomic_uint comebacks, attaches;

/* The most processes a world attached here had: a world with fewer lacks lost processes. */
int most_processes;

MpiabiComm* world_comm;
static MpiabiComm* self_comm;
MpiabiComm* processes_comm;  /* one device per process: where split rounds exchange */

MpiabiComm* new_comm(int rank, int size) {
  MpiabiComm* c = malloc(sizeof(MpiabiComm) + (size_t)size * sizeof(int64_t));
  if (c != NULL) {
    c->magic = kCommMagic;
    c->rank = rank;
    c->size = size;
    c->local_devices = 1;
    c->split_round = 0;
    c->id = 0;
    c->xla_group = 0;
    c->comebacks = atomic_load(&comebacks);
    c->inside = atomic_load(&attaches);
  }
  return c;
}

void name_comm(MpiabiComm* c, const JacclMpiEngine* e) {
  c->id = e != NULL ? e->communicator_id(c->devices, (size_t)c->size, c->split_round) : 0;
}

/* Attaching on first use. A program that never started jaccl (it called
 * jax.distributed.initialize() itself and imports nothing of jaccl's) gets its engine at its
 * first collective: the mpiabi library asks
 * the interpreter, through Python's C API found in the process, to run
 * jax_jaccl._bootstrap.attach_on_first_use(), which starts jaccl's world (a collective over the
 * processes, each at its own first collective) and so attaches it. Once per process: the other
 * threads wait for the first; a failure (its message handed back by jaccl_mpiabi_refuse) is
 * every later call's error. JAX releases the GIL while it runs a computation, so the XLA thread
 * can take it. */
static pthread_mutex_t first_use_lock = PTHREAD_MUTEX_INITIALIZER;
static int first_use_tried;
static char first_use_problem[kMessageBytes];

MPIABI_EXPORT void jaccl_mpiabi_refuse(const char* why) {
  snprintf(first_use_problem, sizeof first_use_problem, "%s", why);
}

typedef int (*PyGilEnsure)(void);
typedef void (*PyGilRelease)(int);
typedef int (*PyRunString)(const char*);
typedef int (*PyIsInitialized)(void);

/* Runs `code` in the process's interpreter, the GIL taken on this thread: 0, non-zero when it
 * raised (its traceback on stderr), -1 when the process has no interpreter. */
int run_python(const char* code) {
  PyIsInitialized is_initialized = (PyIsInitialized)dlsym(RTLD_DEFAULT, "Py_IsInitialized");
  PyGilEnsure ensure = (PyGilEnsure)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
  PyGilRelease release = (PyGilRelease)dlsym(RTLD_DEFAULT, "PyGILState_Release");
  PyRunString run_string = (PyRunString)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
  if (is_initialized == NULL || ensure == NULL || release == NULL || run_string == NULL ||
      !is_initialized()) {
    return -1;
  }
  const int state = ensure();
  const int rc = run_string(code);
  release(state);
  return rc;
}

static void start_engine_through_python(void) {
  const int rc = run_python("__import__('jax_jaccl._bootstrap')._bootstrap.attach_on_first_use()");
  if (rc < 0) {
    jaccl_mpiabi_refuse("this process has no Python interpreter to start it in");
  } else if (rc != 0) {
    jaccl_mpiabi_refuse("jax_jaccl._bootstrap.attach_on_first_use() failed (its traceback is "
                        "on stderr)");
  }
}

const JacclMpiEngine* attached(void) {
  const JacclMpiEngine* e = atomic_load(&engine);
  if (e != NULL) return e;
  pthread_mutex_lock(&first_use_lock);
  if (!first_use_tried) {
    first_use_tried = 1;
    start_engine_through_python();
  }
  pthread_mutex_unlock(&first_use_lock);
  e = atomic_load(&engine);
  if (e == NULL) {
    fail(MPI_ERR_OTHER, "jaccl: XLA ran a collective before jaccl's engine was attached, and "
         "starting it then failed: %s",
         first_use_problem[0] ? first_use_problem : "no reason given");
  }
  return e;
}

/* XLA ignores MPI_Comm_split's result and uses the null handle it leaves: a failed split's
 * message is what such a handle's every use reports. */
static pthread_mutex_t split_failure_lock = PTHREAD_MUTEX_INITIALIZER;
static char split_failure[kMessageBytes];

void remember_split_failure(void) {
  pthread_mutex_lock(&split_failure_lock);
  if (split_failure[0] == '\0') snprintf(split_failure, sizeof split_failure, "%s", last_message);
  pthread_mutex_unlock(&split_failure_lock);
}

MpiabiComm* comm_of(uintptr_t handle) {
  if (handle == MPI_COMM_WORLD) return attached() ? world_comm : NULL;
  if (handle == MPI_COMM_SELF) return attached() ? self_comm : NULL;
  if (handle == 0) {
    pthread_mutex_lock(&split_failure_lock);
    if (split_failure[0] != '\0') fail(MPI_ERR_COMM, "%s", split_failure);
    else fail(MPI_ERR_COMM, "jaccl: a collective on MPI_COMM_NULL");
    pthread_mutex_unlock(&split_failure_lock);
    return NULL;
  }
  MpiabiComm* c = (MpiabiComm*)handle;
  if (handle < 0x10000 || c->magic != kCommMagic) {
    fail(MPI_ERR_COMM, "jaccl: %#lx is not a communicator", (unsigned long)handle);
    return NULL;
  }
  return c;
}

/* ---- datatypes and reductions ---- */


static MpiabiType types[] = {
    {MPI_INT8_T, "int8", 1, 1, -1},        {MPI_SIGNED_CHAR, "int8", 1, 1, -1},
    {MPI_CHAR, "int8", 1, 1, -1},          {MPI_UINT8_T, "uint8", 1, 1, -1},
    {MPI_UNSIGNED_CHAR, "uint8", 1, 1, -1}, {MPI_BYTE, "uint8", 1, 1, -1},
    {MPI_C_BOOL, "uint8", 1, 1, -1},       {MPI_INT16_T, "int16", 2, 1, -1},
    {MPI_SHORT, "int16", 2, 1, -1},        {MPI_UINT16_T, "uint16", 2, 1, -1},
    {MPI_UNSIGNED_SHORT, "uint16", 2, 1, -1}, {MPI_INT32_T, "int32", 4, 1, -1},
    {MPI_INT, "int32", 4, 1, -1},          {MPI_UINT32_T, "uint32", 4, 1, -1},
    {MPI_UNSIGNED, "uint32", 4, 1, -1},    {MPI_INT64_T, "int64", 8, 1, -1},
    {MPI_LONG, "int64", 8, 1, -1},         {MPI_LONG_LONG, "int64", 8, 1, -1},
    {MPI_LONG_LONG_INT, "int64", 8, 1, -1}, {MPI_UINT64_T, "uint64", 8, 1, -1},
    {MPI_UNSIGNED_LONG, "uint64", 8, 1, -1}, {MPI_UNSIGNED_LONG_LONG, "uint64", 8, 1, -1},
    {MPI_FLOAT, "float32", 4, 1, -1},      {MPI_DOUBLE, "float64", 8, 1, -1},
    {MPI_C_COMPLEX, "float32", 8, 2, -1},  {MPI_C_FLOAT_COMPLEX, "float32", 8, 2, -1},
    {MPI_C_DOUBLE_COMPLEX, "float64", 16, 2, -1},
};

const MpiabiType* type_of(uintptr_t handle) {
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) {
    if (types[i].handle == handle) return &types[i];
  }
  fail(MPI_ERR_TYPE, "jaccl: MPI datatype %#lx is not one jaccl's mpiabi library moves (XLA's "
       "integer, float32/64 and complex types are)", (unsigned long)handle);
  return NULL;
}

static struct { uintptr_t handle; const char* name; int32_t code; } ops[] = {
    {MPI_SUM, "sum", -1}, {MPI_PROD, "prod", -1}, {MPI_MAX, "max", -1}, {MPI_MIN, "min", -1},
};

static int op_of(uintptr_t handle, const MpiabiType* type, int32_t* code) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
    if (ops[i].handle != handle) continue;
    if (type->parts > 1 && handle != MPI_SUM) {
      return fail(MPI_ERR_OP, "jaccl: MPI_%s of complex numbers is not supported (MPI_SUM is)",
                  ops[i].name);
    }
    *code = ops[i].code;
    return MPI_SUCCESS;
  }
  return fail(MPI_ERR_OP, "jaccl: MPI op %#lx is not supported (MPI_SUM, MPI_PROD, MPI_MAX and "
              "MPI_MIN are)", (unsigned long)handle);
}

/* ---- attaching the engine ---- */

MPIABI_EXPORT int jaccl_mpiabi_expect(int rank, int size) {
  expected_rank = rank;
  expected_size = size;
  return 0;
}

/* Whether `e` describes the world MPI_COMM_WORLD already stands for: the same devices, the same
 * place of this process among them. */
static int same_world(const JacclMpiEngine* e) {
  const int size = e->num_processes * e->devices_per_process;
  if (world_comm == NULL || world_comm->size != size ||
      world_comm->rank != e->my_process * e->devices_per_process ||
      world_comm->local_devices != e->devices_per_process) {
    return 0;
  }
  return memcmp(world_comm->devices, e->devices, (size_t)size * sizeof(int64_t)) == 0;
}

MPIABI_EXPORT int jaccl_mpiabi_attach(const JacclMpiEngine* e, char* error, size_t error_len) {
  if (e == NULL || e->version != kJacclMpiEngineVersion) {
    snprintf(error, error_len, "the mpiabi library expects engine table version %d, not %d",
             kJacclMpiEngineVersion, e == NULL ? -1 : (int)e->version);
    return 1;
  }
  const JacclMpiEngine* before = atomic_load(&engine);
  if (before != NULL && same_world(e)) return 0;  /* jaccl started again over the same world */
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) types[i].code = e->dtype_code(types[i].name);
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) ops[i].code = e->reduce_code(ops[i].name);
  const int per_process = e->devices_per_process;
  MpiabiComm* world = new_comm(e->my_process * per_process, e->num_processes * per_process);
  MpiabiComm* self = new_comm(0, 1);
  MpiabiComm* processes = new_comm(e->my_process, e->num_processes);
  if (world == NULL || self == NULL || processes == NULL) {
    snprintf(error, error_len, "out of memory attaching the mpiabi library");
    return 1;
  }
  memcpy(world->devices, e->devices, (size_t)world->size * sizeof(int64_t));
  world->local_devices = per_process;
  self->devices[0] = e->devices[e->my_process * per_process];
  for (int p = 0; p < e->num_processes; ++p) processes->devices[p] = e->devices[p * per_process];
  name_comm(world, e);
  name_comm(self, e);
  name_comm(processes, e);
  /* Attached again (a new world after a lost process, made while no collective of XLA's
   * runs and the process's other devices wait to split MPI_COMM_WORLD: world_for_split()):
   * MPI_COMM_WORLD is the new world's devices from here on. The old communicators are left
   * as they are: a collective may still hold one (it fails, as its world did). */
  world_comm = world;
  self_comm = self;
  if (e->num_processes > most_processes) most_processes = e->num_processes;
  processes_comm = processes;
  atomic_store(&engine, e);
  atomic_fetch_add(&attaches, 1);
  return 0;
}


static int run(const JacclCollectiveRequest* call) {
  char error[kMessageBytes];
  if (atomic_load(&engine)->run_call(call, error, sizeof error) != 0) {
    return fail(MPI_ERR_OTHER, "%s", error);
  }
  return MPI_SUCCESS;
}

/* With several devices per process, MPI_COMM_WORLD's rank is not known from a call: XLA only
 * splits it, and the mpiabi library runs nothing else on it. */
int refuse_world(const MpiabiComm* c) {
  return fail(MPI_ERR_COMM, "jaccl: a collective or transfer on MPI_COMM_WORLD with %d CPU "
              "devices per process (the mpiabi library supports splitting it, as XLA does)",
              c->local_devices);
}

/* A collective on `c` of `count` MPI elements of `type` in and `out_count` out; `site`:
 * kJacclMpiabiSplitSite for a split's exchange, else 0. */
int collective_at(int32_t kind, const MpiabiComm* c, const MpiabiType* type, int32_t op,
                         const void* in, void* out, size_t count, size_t out_count,
                         uint32_t site) {
  if (c->local_devices > 1) return refuse_world(c);
  if (type->code < 0) return fail(MPI_ERR_TYPE, "jaccl: no engine type %s", type->name);
  JacclCollectiveRequest call;
  memset(&call, 0, sizeof call);
  call.address = address_on(c);
  call.address.kind = (uint8_t)kind;
  call.address.dtype = (uint8_t)type->code;
  call.address.site = site;
  call.op = (uint8_t)op;
  call.in = in;
  call.out = out;
  call.in_count = count * (size_t)type->parts;
  call.out_count = out_count * (size_t)type->parts;
  call.outer_in = call.outer_out = 1;
  call.row_elems = 1;
  return run(&call);
}

int collective(int32_t kind, const MpiabiComm* c, const MpiabiType* type, int32_t op,
                      const void* in, void* out, size_t count, size_t out_count) {
  return collective_at(kind, c, type, op, in, out, count, out_count, 0);
}

/* ---- initialisation ---- */

MPIABI_EXPORT int MPIABI_Init(int* argc, char*** argv) {
  atomic_store(&initialized, 1);
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  atomic_store(&initialized, 1);
  if (provided != NULL) *provided = MPI_THREAD_MULTIPLE;
  return MPI_SUCCESS;
}

/* XLA frees its communicators after MPI_Finalize (when the CPU client dies): allowed here. */
MPIABI_EXPORT int MPIABI_Finalize(void) {
  atomic_store(&finalized, 1);
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Initialized(int* flag) {
  *flag = atomic_load(&initialized);
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Finalized(int* flag) {
  *flag = atomic_load(&finalized);
  return MPI_SUCCESS;
}

/* Every thread may call (the engine routes by communicator and rank): XLA's thread check. */
MPIABI_EXPORT int MPIABI_Is_thread_main(int* flag) {
  *flag = 1;
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Query_thread(int* provided) {
  *provided = MPI_THREAD_MULTIPLE;
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Get_version(int* version, int* subversion) {
  *version = 3;
  *subversion = 1;
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Get_library_version(char* version, int* length) {
  *length = snprintf(version, 8192, "jaccl's mpiabi library %d.%d.%d (MPI ABI %d.%d.%d): XLA:CPU's "
                     "collectives on jax_jaccl's engine", MPIWRAPPER_VERSION_MAJOR,
                     MPIWRAPPER_VERSION_MINOR, MPIWRAPPER_VERSION_PATCH,
                     MPIABI_VERSION_MAJOR, MPIABI_VERSION_MINOR,
                     MPIABI_VERSION_PATCH);
  return MPI_SUCCESS;
}

MPIABI_EXPORT double MPIABI_Wtime(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

MPIABI_EXPORT double MPIABI_Wtick(void) { return 1e-9; }

MPIABI_EXPORT intptr_t MPIABI_Aint_add(intptr_t base, intptr_t disp) { return base + disp; }
MPIABI_EXPORT intptr_t MPIABI_Aint_diff(intptr_t a, intptr_t b) { return a - b; }

MPIABI_EXPORT int MPIABI_Type_size(uintptr_t datatype, int* size) {
  const MpiabiType* type = type_of(datatype);
  if (type == NULL) return last_code;
  *size = type->size;
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Error_class(int code, int* error_class) {
  *error_class = code;
  return MPI_SUCCESS;
}

MPIABI_EXPORT int MPIABI_Error_string(int code, char* text, int* length) {
  if (code == last_code && last_message[0] != '\0') {
    *length = snprintf(text, kMessageBytes, "%s", last_message);
  } else {
    *length = snprintf(text, kMessageBytes, "jaccl: MPI error %d", code);
  }
  if (*length >= kMessageBytes) *length = kMessageBytes - 1;
  return MPI_SUCCESS;
}

/* ---- collectives (out of place, as XLA calls them) ---- */

/* XLA's collectives this process has run here (all-reduces, all-gathers, reduce-scatters,
 * all-to-all rounds, collective-permute requests): jax_jaccl.testing tells a test whose
 * jax.lax ran on jaccl's engine so (jax_jaccl/_xla_collectives.py: served()). */
atomic_ulong served;

MPIABI_EXPORT unsigned long jaccl_mpiabi_served(void) { return atomic_load(&served); }

/* XLA:CPU narrows a collective's element count (a size_t) to MPI's int: 2^31 to 2^32 - 1
 * elements arrive negative and are refused here, naming the count they were; 2^32 elements or
 * more arrive as the count modulo 2^32, which nothing here can tell from a real one
 * (docs/xla-collectives.md). */
int refuse_wrapped_count(const char* name, int count) {
  return fail(MPI_ERR_COUNT, "jaccl: %s of %u elements (%d once XLA made it an MPI int): XLA's "
              "collectives carry element counts as 32-bit ints, so one of 2^31 elements or more "
              "cannot run on them; split the array", name, (unsigned)count, count);
}

MPIABI_EXPORT int MPIABI_Allreduce(const void* send, void* recv, int count, uintptr_t datatype,
                                 uintptr_t op, uintptr_t comm) {
  if (count < 0) return refuse_wrapped_count("MPI_Allreduce", count);
  atomic_fetch_add(&served, 1);
  MpiabiComm* c = comm_in_use(comm);
  const MpiabiType* type = c ? type_of(datatype) : NULL;
  int32_t code = 0;  /* set by op_of when it succeeds */
  if (type == NULL || op_of(op, type, &code) != MPI_SUCCESS) return last_code;
  const void* in = send == MPI_IN_PLACE ? recv : send;
  return collective(atomic_load(&engine)->kind_all_reduce, c, type, code, in, recv,
                    (size_t)count, (size_t)count);
}

static int reduce_scatter(const char* name, const void* send, void* recv, int count,
                          uintptr_t datatype, uintptr_t op, uintptr_t comm) {
  if (count < 0) return refuse_wrapped_count(name, count);
  atomic_fetch_add(&served, 1);
  MpiabiComm* c = comm_in_use(comm);
  const MpiabiType* type = c ? type_of(datatype) : NULL;
  int32_t code = 0;  /* set by op_of when it succeeds */
  if (type == NULL || op_of(op, type, &code) != MPI_SUCCESS) return last_code;
  if (send == MPI_IN_PLACE) return fail(MPI_ERR_ARG, "jaccl: %s with MPI_IN_PLACE", name);
  return collective(atomic_load(&engine)->kind_reduce_scatter, c, type, code, send, recv,
                    (size_t)count * (size_t)c->size, (size_t)count);
}

MPIABI_EXPORT int MPIABI_Reduce_scatter_block(const void* send, void* recv, int count,
                                            uintptr_t datatype, uintptr_t op, uintptr_t comm) {
  return reduce_scatter("MPI_Reduce_scatter_block", send, recv, count, datatype, op, comm);
}

/* XLA's counts are all equal (a reduce-scatter of equal blocks); others are refused. */
MPIABI_EXPORT int MPIABI_Reduce_scatter(const void* send, void* recv, const int counts[],
                                      uintptr_t datatype, uintptr_t op, uintptr_t comm) {
  MpiabiComm* c = comm_in_use(comm);
  if (c == NULL) return last_code;
  for (int r = 1; r < c->size; ++r) {
    if (counts[r] != counts[0]) {
      return fail(MPI_ERR_COUNT, "jaccl: MPI_Reduce_scatter with unequal counts (%d for rank 0, "
                  "%d for rank %d) is not supported", counts[0], counts[r], r);
    }
  }
  return reduce_scatter("MPI_Reduce_scatter", send, recv, counts[0], datatype, op, comm);
}

MPIABI_EXPORT int MPIABI_Allgather(const void* send, int send_count, uintptr_t send_type,
                                 void* recv, int recv_count, uintptr_t recv_type, uintptr_t comm) {
  if (send_count < 0) return refuse_wrapped_count("MPI_Allgather", send_count);
  atomic_fetch_add(&served, 1);
  MpiabiComm* c = comm_in_use(comm);
  const MpiabiType* type = c ? type_of(send_type) : NULL;
  if (type == NULL) return last_code;
  if (send_type != recv_type || send_count != recv_count || send == MPI_IN_PLACE) {
    return fail(MPI_ERR_ARG, "jaccl: MPI_Allgather needs equal send and receive types and "
                "counts, out of place (got %d and %d elements)", send_count, recv_count);
  }
  return collective(atomic_load(&engine)->kind_all_gather, c, type, 0, send, recv,
                    (size_t)send_count, (size_t)send_count * (size_t)c->size);
}

MPIABI_EXPORT int MPIABI_Barrier(uintptr_t comm) {
  MpiabiComm* c = comm_in_use(comm);
  if (c == NULL) return last_code;
  int32_t in = 0, out = 0;
  return collective(atomic_load(&engine)->kind_all_reduce, c, type_of(MPI_INT32_T), ops[0].code,
                    &in, &out, 1, 1);
}

