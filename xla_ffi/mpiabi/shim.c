/* libjaccl_mpiabi.so: the MPI calls XLA:CPU's 'mpi' collectives make, carried by jaccl's engine.
 *
 * jaxlib links MPItrampoline, which at `import jax` loads the library MPITRAMPOLINE_LIB names and
 * resolves 641 symbols in it (abi_symbols.txt; mpiabi_exports.c defines the constants and a stub
 * for every function). This file implements what XLA calls (docs/xla-collectives.md, "How it
 * works"):
 * Init_thread, Finalize, Comm_rank/size, Is_thread_main, Comm_split/dup/free, Allreduce,
 * Allgather, Reduce_scatter(_block), Barrier, Sendrecv, Isend/Irecv/Wait(all), Error_string,
 * and the small helpers around them. It holds no engine: _jaccl attaches its own through
 * jaccl_mpiabi_attach() once the world is up (abi/mpiabi_table.h), so a process has one
 * engine; in a program that never started jaccl, XLA's first collective starts it (attached()).
 *
 * Communicators are tables of global device ids, the same tables jaccl's own ops use, so the
 * engine finds the same groups and channels (with several devices per process, the shim places
 * members on devices itself: split_world() below); its calls are
 * numbered in a sequence space of their own (kJacclXlaCollectives), so a rank that takes a
 * jaccl op where its peer takes an XLA collective gets "ranks disagree", never the peer's
 * data. Comm_split is
 * an all-gather of (color, key) over the parent. Isend/Irecv only queue; the first Wait on a
 * thread runs everything that thread queued in one point-to-point call, sends and receives
 * together, which is how XLA's collective-permute posts them. A failure returns an MPI error
 * code and keeps jaccl's message for MPI_Error_string (XLA puts it in the JAX exception).
 * After a lost process (the world failed, JAX's recoverability on), a split of MPI_COMM_WORLD
 * first lets the interpreter build the survivors' world (renew_after_loss()), which attaches
 * again: MPI_COMM_WORLD is the survivors from then on. When a process comes back (started
 * again), the others' communicators are split again at their first use (comm_in_use()), as the
 * one that came back makes its own.
 * Thread-safe: XLA calls from any of its worker threads. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi/mpiabi_table.h"
#include "mpiabi_values.h"
#include "shim.h"
#include "split_round.h"

#define JMPI_EXPORT __attribute__((visibility("default")))
enum { kMessageBytes = 1024, kCommMagic = 0x4a434f4d, kRequestMagic = 0x4a524551 };

/* ---- errors: the last failure of this thread, for MPI_Error_string ---- */

static __thread char last_message[kMessageBytes];
static __thread int last_code;

static int fail(int code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_message, sizeof last_message, format, args);
  va_end(args);
  last_code = code;
  return code;
}

void jmpi_unsupported(const char* function) {
  fail(JMPI_ERR_UNSUPPORTED_OPERATION,
       "jaccl: %s is not supported by jaccl's MPI shim (it implements the calls XLA:CPU's "
       "collectives make)", function);
}

/* ---- the engine and the world ---- */

static const JacclMpiEngine* _Atomic engine;
static int expected_rank = 0, expected_size = 1;  /* WORLD's answers before the attach */
static atomic_int initialized, finalized;

typedef struct JmpiComm {
  uint32_t magic;
  int rank, size;
  int local_devices;  /* MPI_COMM_WORLD with several devices per process: how many; else 1 */
  uint64_t split_round; /* the split round that made it, with several devices per process */
  int xla_group;      /* made by XLA's split of MPI_COMM_WORLD */
  unsigned comebacks; /* how many processes had come back when it was (last) made */
  unsigned inside;    /* the last attach whose world was seen to hold its devices */
  int64_t devices[];  /* the group in rank order */
} JmpiComm;

/* Processes that came back (started again) into this process's world so far:
 * jaccl_mpiabi_came_back(); worlds attached so far (jaccl_mpiabi_attach()). */
static atomic_uint comebacks, attaches;

/* The most processes a world attached here had: a world with fewer lacks lost processes. */
static int most_processes;

static JmpiComm* world_comm;
static JmpiComm* self_comm;
static JmpiComm* processes_comm;  /* one device per process: where split rounds exchange */

static JmpiComm* new_comm(int rank, int size) {
  JmpiComm* c = malloc(sizeof(JmpiComm) + (size_t)size * sizeof(int64_t));
  if (c != NULL) {
    c->magic = kCommMagic;
    c->rank = rank;
    c->size = size;
    c->local_devices = 1;
    c->split_round = 0;
    c->xla_group = 0;
    c->comebacks = atomic_load(&comebacks);
    c->inside = atomic_load(&attaches);
  }
  return c;
}

/* Attaching on first use. A program that never started jaccl (it called
 * jax.distributed.initialize() itself and imports nothing of jaccl's) gets its engine at its
 * first collective: the shim asks
 * the interpreter, through Python's C API found in the process, to run
 * jax_jaccl._bootstrap.attach_on_first_use(), which starts jaccl's world (a collective over the
 * processes, each at its own first collective) and so attaches it. Once per process: the other
 * threads wait for the first; a failure (its message handed back by jaccl_mpiabi_refuse) is
 * every later call's error. JAX releases the GIL while it runs a computation, so the XLA thread
 * can take it. */
static pthread_mutex_t first_use_lock = PTHREAD_MUTEX_INITIALIZER;
static int first_use_tried;
static char first_use_problem[kMessageBytes];

JMPI_EXPORT void jaccl_mpiabi_refuse(const char* why) {
  snprintf(first_use_problem, sizeof first_use_problem, "%s", why);
}

typedef int (*PyGilEnsure)(void);
typedef void (*PyGilRelease)(int);
typedef int (*PyRunString)(const char*);
typedef int (*PyIsInitialized)(void);

/* Runs `code` in the process's interpreter, the GIL taken on this thread: 0, non-zero when it
 * raised (its traceback on stderr), -1 when the process has no interpreter. */
static int run_python(const char* code) {
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

static const JacclMpiEngine* attached(void) {
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
    fail(JMPI_ERR_OTHER, "jaccl: XLA ran a collective before jaccl's engine was attached, and "
         "starting it then failed: %s",
         first_use_problem[0] ? first_use_problem : "no reason given");
  }
  return e;
}

/* XLA ignores MPI_Comm_split's result and uses the null handle it leaves: a failed split's
 * message is what such a handle's every use reports. */
static pthread_mutex_t split_failure_lock = PTHREAD_MUTEX_INITIALIZER;
static char split_failure[kMessageBytes];

static void remember_split_failure(void) {
  pthread_mutex_lock(&split_failure_lock);
  if (split_failure[0] == '\0') snprintf(split_failure, sizeof split_failure, "%s", last_message);
  pthread_mutex_unlock(&split_failure_lock);
}

static JmpiComm* comm_of(uintptr_t handle) {
  if (handle == JMPI_COMM_WORLD) return attached() ? world_comm : NULL;
  if (handle == JMPI_COMM_SELF) return attached() ? self_comm : NULL;
  if (handle == 0) {
    pthread_mutex_lock(&split_failure_lock);
    if (split_failure[0] != '\0') fail(JMPI_ERR_COMM, "%s", split_failure);
    else fail(JMPI_ERR_COMM, "jaccl: a collective on MPI_COMM_NULL");
    pthread_mutex_unlock(&split_failure_lock);
    return NULL;
  }
  JmpiComm* c = (JmpiComm*)handle;
  if (handle < 0x10000 || c->magic != kCommMagic) {
    fail(JMPI_ERR_COMM, "jaccl: %#lx is not a communicator", (unsigned long)handle);
    return NULL;
  }
  return c;
}

static int64_t my_device(const JmpiComm* c) { return c->devices[c->rank]; }

/* ---- datatypes and reductions ---- */

typedef struct {
  uintptr_t handle;
  const char* name;  /* the engine's element type */
  int size, parts;   /* bytes per MPI element; engine elements per MPI element */
  int32_t code;      /* filled at attach */
} JmpiType;

static JmpiType types[] = {
    {JMPI_INT8_T, "int8", 1, 1, -1},        {JMPI_SIGNED_CHAR, "int8", 1, 1, -1},
    {JMPI_CHAR, "int8", 1, 1, -1},          {JMPI_UINT8_T, "uint8", 1, 1, -1},
    {JMPI_UNSIGNED_CHAR, "uint8", 1, 1, -1}, {JMPI_BYTE, "uint8", 1, 1, -1},
    {JMPI_C_BOOL, "uint8", 1, 1, -1},       {JMPI_INT16_T, "int16", 2, 1, -1},
    {JMPI_SHORT, "int16", 2, 1, -1},        {JMPI_UINT16_T, "uint16", 2, 1, -1},
    {JMPI_UNSIGNED_SHORT, "uint16", 2, 1, -1}, {JMPI_INT32_T, "int32", 4, 1, -1},
    {JMPI_INT, "int32", 4, 1, -1},          {JMPI_UINT32_T, "uint32", 4, 1, -1},
    {JMPI_UNSIGNED, "uint32", 4, 1, -1},    {JMPI_INT64_T, "int64", 8, 1, -1},
    {JMPI_LONG, "int64", 8, 1, -1},         {JMPI_LONG_LONG, "int64", 8, 1, -1},
    {JMPI_LONG_LONG_INT, "int64", 8, 1, -1}, {JMPI_UINT64_T, "uint64", 8, 1, -1},
    {JMPI_UNSIGNED_LONG, "uint64", 8, 1, -1}, {JMPI_UNSIGNED_LONG_LONG, "uint64", 8, 1, -1},
    {JMPI_FLOAT, "float32", 4, 1, -1},      {JMPI_DOUBLE, "float64", 8, 1, -1},
    {JMPI_C_COMPLEX, "float32", 8, 2, -1},  {JMPI_C_FLOAT_COMPLEX, "float32", 8, 2, -1},
    {JMPI_C_DOUBLE_COMPLEX, "float64", 16, 2, -1},
};

static const JmpiType* type_of(uintptr_t handle) {
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) {
    if (types[i].handle == handle) return &types[i];
  }
  fail(JMPI_ERR_TYPE, "jaccl: MPI datatype %#lx is not one jaccl's MPI shim moves (XLA's "
       "integer, float32/64 and complex types are)", (unsigned long)handle);
  return NULL;
}

static struct { uintptr_t handle; const char* name; int32_t code; } ops[] = {
    {JMPI_SUM, "sum", -1}, {JMPI_PROD, "prod", -1}, {JMPI_MAX, "max", -1}, {JMPI_MIN, "min", -1},
};

static int op_of(uintptr_t handle, const JmpiType* type, int32_t* code) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
    if (ops[i].handle != handle) continue;
    if (type->parts > 1 && handle != JMPI_SUM) {
      return fail(JMPI_ERR_OP, "jaccl: MPI_%s of complex numbers is not supported (MPI_SUM is)",
                  ops[i].name);
    }
    *code = ops[i].code;
    return JMPI_SUCCESS;
  }
  return fail(JMPI_ERR_OP, "jaccl: MPI op %#lx is not supported (MPI_SUM, MPI_PROD, MPI_MAX and "
              "MPI_MIN are)", (unsigned long)handle);
}

/* ---- attaching the engine ---- */

JMPI_EXPORT int jaccl_mpiabi_expect(int rank, int size) {
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

JMPI_EXPORT int jaccl_mpiabi_attach(const JacclMpiEngine* e, char* error, size_t error_len) {
  if (e == NULL || e->version != kJacclMpiEngineVersion) {
    snprintf(error, error_len, "the MPI shim expects engine table version %d, not %d",
             kJacclMpiEngineVersion, e == NULL ? -1 : (int)e->version);
    return 1;
  }
  const JacclMpiEngine* before = atomic_load(&engine);
  if (before != NULL && same_world(e)) return 0;  /* jaccl started again over the same world */
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) types[i].code = e->dtype_code(types[i].name);
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) ops[i].code = e->reduce_code(ops[i].name);
  const int per_process = e->devices_per_process;
  JmpiComm* world = new_comm(e->my_process * per_process, e->num_processes * per_process);
  JmpiComm* self = new_comm(0, 1);
  JmpiComm* processes = new_comm(e->my_process, e->num_processes);
  if (world == NULL || self == NULL || processes == NULL) {
    snprintf(error, error_len, "out of memory attaching the MPI shim");
    return 1;
  }
  memcpy(world->devices, e->devices, (size_t)world->size * sizeof(int64_t));
  world->local_devices = per_process;
  self->devices[0] = e->devices[e->my_process * per_process];
  for (int p = 0; p < e->num_processes; ++p) processes->devices[p] = e->devices[p * per_process];
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

static __thread char renew_problem[kMessageBytes];

/* Why renew_after_loss() made no new world though one failed (the interpreter says so). */
JMPI_EXPORT void jaccl_mpiabi_renew_failed(const char* why) {
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
JMPI_EXPORT void jaccl_mpiabi_group_refused(const char* why) {
  snprintf(group_problem, sizeof group_problem, "%s", why);
}

static int lacks_processes(void);

/* A communicator XLA made of MPI_COMM_WORLD in a world that lacks processes (after a loss):
 * XLA never says a group's size, so a group of a program compiled before the loss that had
 * the lost devices at its end only comes out whole here, its live members alone. The
 * interpreter, which read every compiled program's groups, tells (jax_jaccl._xla_groups);
 * a refused communicator is freed and the split fails saying why. */
static int check_after_loss(uintptr_t* newcomm, uint64_t round) {
  JmpiComm* c = (JmpiComm*)*newcomm;
  if (c == NULL || !atomic_load(&recoverable) || !lacks_processes()) return JMPI_SUCCESS;
  const size_t bytes = 128 + 24 * (size_t)c->size;
  char* code = malloc(bytes);
  if (code == NULL) return fail(JMPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  size_t at = (size_t)snprintf(code, bytes,
                               "__import__('jax_jaccl._xla_groups')._xla_groups.split_after_loss((");
  for (int i = 0; i < c->size; ++i) {
    at += (size_t)snprintf(code + at, bytes - at, "%lld,", (long long)c->devices[i]);
  }
  snprintf(code + at, bytes - at, "), %llu)", (unsigned long long)round);
  group_problem[0] = '\0';
  run_python(code);
  free(code);
  if (group_problem[0] == '\0') return JMPI_SUCCESS;
  c->magic = 0;
  free(c);
  *newcomm = 0;
  return fail(JMPI_ERR_OTHER, "%s", group_problem);
}

static int run(const JacclHostCall* call) {
  char error[kMessageBytes];
  if (atomic_load(&engine)->run_call(call, error, sizeof error) != 0) {
    return fail(JMPI_ERR_OTHER, "%s", error);
  }
  return JMPI_SUCCESS;
}

/* With several devices per process, MPI_COMM_WORLD's rank is not known from a call: XLA only
 * splits it, and the shim runs nothing else on it. */
static int refuse_world(const JmpiComm* c) {
  return fail(JMPI_ERR_COMM, "jaccl: a collective or transfer on MPI_COMM_WORLD with %d CPU "
              "devices per process (the shim supports splitting it, as XLA does)",
              c->local_devices);
}

/* A collective on `c` of `count` MPI elements of `type` in and `out_count` out; `site`:
 * kJacclShimSplitSite for a split's exchange, else 0. */
static int collective_at(int32_t kind, const JmpiComm* c, const JmpiType* type, int32_t op,
                         const void* in, void* out, size_t count, size_t out_count,
                         uint32_t site) {
  if (c->local_devices > 1) return refuse_world(c);
  if (type->code < 0) return fail(JMPI_ERR_TYPE, "jaccl: no engine type %s", type->name);
  JacclHostCall call;
  memset(&call, 0, sizeof call);
  call.kind = kind;
  call.device = my_device(c);
  call.groups = c->devices;
  call.groups_len = (size_t)c->size;
  call.group_size = c->size;
  call.dtype = type->code;
  call.op = op;
  call.in = in;
  call.out = out;
  call.in_count = count * (size_t)type->parts;
  call.out_count = out_count * (size_t)type->parts;
  call.outer_in = call.outer_out = 1;
  call.space = kJacclXlaCollectives;
  call.split_round = c->split_round;
  call.site = site;
  return run(&call);
}

static int collective(int32_t kind, const JmpiComm* c, const JmpiType* type, int32_t op,
                      const void* in, void* out, size_t count, size_t out_count) {
  return collective_at(kind, c, type, op, in, out, count, out_count, 0);
}

/* ---- initialisation ---- */

JMPI_EXPORT int MPIABI_Init(int* argc, char*** argv) {
  atomic_store(&initialized, 1);
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  atomic_store(&initialized, 1);
  if (provided != NULL) *provided = JMPI_THREAD_MULTIPLE;
  return JMPI_SUCCESS;
}

/* XLA frees its communicators after MPI_Finalize (when the CPU client dies): allowed here. */
JMPI_EXPORT int MPIABI_Finalize(void) {
  atomic_store(&finalized, 1);
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Initialized(int* flag) {
  *flag = atomic_load(&initialized);
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Finalized(int* flag) {
  *flag = atomic_load(&finalized);
  return JMPI_SUCCESS;
}

/* Every thread may call (the engine routes by communicator and rank): XLA's thread check. */
JMPI_EXPORT int MPIABI_Is_thread_main(int* flag) {
  *flag = 1;
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Query_thread(int* provided) {
  *provided = JMPI_THREAD_MULTIPLE;
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Get_version(int* version, int* subversion) {
  *version = 3;
  *subversion = 1;
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Get_library_version(char* version, int* length) {
  *length = snprintf(version, 8192, "jaccl's MPI shim %d.%d.%d (MPI ABI %d.%d.%d): XLA:CPU's "
                     "collectives on jax_jaccl's engine", JMPI_VERSION_MPIWRAPPER_VERSION_MAJOR,
                     JMPI_VERSION_MPIWRAPPER_VERSION_MINOR, JMPI_VERSION_MPIWRAPPER_VERSION_PATCH,
                     JMPI_VERSION_MPIABI_VERSION_MAJOR, JMPI_VERSION_MPIABI_VERSION_MINOR,
                     JMPI_VERSION_MPIABI_VERSION_PATCH);
  return JMPI_SUCCESS;
}

JMPI_EXPORT double MPIABI_Wtime(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

JMPI_EXPORT double MPIABI_Wtick(void) { return 1e-9; }

JMPI_EXPORT intptr_t MPIABI_Aint_add(intptr_t base, intptr_t disp) { return base + disp; }
JMPI_EXPORT intptr_t MPIABI_Aint_diff(intptr_t a, intptr_t b) { return a - b; }

JMPI_EXPORT int MPIABI_Type_size(uintptr_t datatype, int* size) {
  const JmpiType* type = type_of(datatype);
  if (type == NULL) return last_code;
  *size = type->size;
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Error_class(int code, int* error_class) {
  *error_class = code;
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Error_string(int code, char* text, int* length) {
  if (code == last_code && last_message[0] != '\0') {
    *length = snprintf(text, kMessageBytes, "%s", last_message);
  } else {
    *length = snprintf(text, kMessageBytes, "jaccl: MPI error %d", code);
  }
  if (*length >= kMessageBytes) *length = kMessageBytes - 1;
  return JMPI_SUCCESS;
}

/* ---- communicators ---- */

JMPI_EXPORT int MPIABI_Comm_rank(uintptr_t comm, int* rank) {
  if (comm == JMPI_COMM_WORLD && atomic_load(&engine) == NULL) {
    *rank = expected_rank;  /* XLA asks right after MPI_Init_thread, for its logs */
    return JMPI_SUCCESS;
  }
  JmpiComm* c = comm_of(comm);
  if (c == NULL) return last_code;
  *rank = c->rank;
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Comm_size(uintptr_t comm, int* size) {
  if (comm == JMPI_COMM_WORLD && atomic_load(&engine) == NULL) {
    *size = expected_size;
    return JMPI_SUCCESS;
  }
  JmpiComm* c = comm_of(comm);
  if (c == NULL) return last_code;
  *size = c->size;
  return JMPI_SUCCESS;
}

/* A split round's exchange (split_round.h): every process's sorted (color, key) pairs. */
static int exchange_pairs(const int64_t* mine, int64_t* all, void* context, char* error,
                          size_t error_len) {
  const JmpiComm* processes = context;
  const size_t per_process = (size_t)world_comm->local_devices;
  const int rc = collective(atomic_load(&engine)->kind_all_gather, processes,
                            type_of(JMPI_INT64_T), 0, mine, all, 2 * per_process,
                            2 * per_process * (size_t)processes->size);
  if (rc != JMPI_SUCCESS) snprintf(error, error_len, "%s", last_message);
  return rc != JMPI_SUCCESS;
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
    int first = *color != JMPI_UNDEFINED;  /* each color once, at its first place */
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

/* Whether the world attached lacks processes an earlier one had (lost, not back). */
static int lacks_processes(void) { return atomic_load(&engine)->num_processes < most_processes; }

/* Fails a split whose groups broken_group() refused, saying which of its causes is likely. */
static int refuse_split(int64_t color, int members, const char* why) {
  const JacclMpiEngine* e = atomic_load(&engine);
  if (lacks_processes()) {
    return fail(JMPI_ERR_OTHER, "jaccl: XLA's group of devices led by device %lld is not whole "
                "(%d members split: %s): it has devices of no process of jaccl's world (a mesh "
                "over a lost process's devices): run the program over a mesh of the live "
                "devices (multihost_utils.live_devices)", (long long)color, members, why);
  }
  if (e->devices_per_process > 1) {
    return fail(JMPI_ERR_OTHER, "jaccl: MPI_Comm_split: the processes made communicators for "
                "different collectives at once (group of device %lld, %d members seen: %s). "
                "With several CPU devices per process, every collective must find its groups "
                "new on all processes or on none; XLA caches communicators per process, which "
                "breaks this when meshes order a process's devices differently. Keep such "
                "programs on gloo (jaccl-run --xla-collectives gloo)",
                (long long)color, members, why);
  }
  return fail(JMPI_ERR_OTHER, "jaccl: MPI_Comm_split: the processes made communicators for "
              "different groups at once (group of device %lld, %d members seen: %s): do they "
              "run one program?", (long long)color, members, why);
}

/* The end of every split: the communicator of `color` out of the (color, key) of each of the
 * parent's n places, `all`: the places of that color by key (ties by place), their devices,
 * the caller's rank where its place `me` lands, and the split round that made it, `round`.
 * MPI_COMM_NULL (0) for MPI_UNDEFINED. */
static int comm_of_color(const JmpiComm* parent, const int64_t* all, int color, int me,
                         uint64_t round, uintptr_t* newcomm) {
  *newcomm = 0;
  if (color == JMPI_UNDEFINED) return JMPI_SUCCESS;
  const int n = parent->size;
  int* order = malloc((size_t)n * sizeof(int));
  if (order == NULL) return fail(JMPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
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
  JmpiComm* c = new_comm(0, members);
  if (c == NULL) {
    free(order);
    return fail(JMPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  }
  for (int i = 0; i < members; ++i) {
    c->devices[i] = parent->devices[order[i]];
    if (order[i] == me) c->rank = i;
  }
  c->split_round = round;
  *newcomm = (uintptr_t)c;
  free(order);
  return JMPI_SUCCESS;
}

/* MPI_COMM_WORLD with several devices per process: this process's devices meet in a split
 * round; each caller is given the device at its pair's place among the process's (so one
 * communicator never has a device twice), and the communicator of its color is everyone of
 * that color by key, made in that round: an equal table made in another round, whose
 * devices may stand for other XLA devices, is another communicator. */
static int split_world(const JmpiComm* world, int color, int key, uintptr_t* newcomm) {
  const JacclMpiEngine* e = atomic_load(&engine);
  const int per_process = world->local_devices, n = world->size;
  int64_t* all = malloc(2 * (size_t)n * sizeof(int64_t));
  if (all == NULL) return fail(JMPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  int slot = 0, rc = JMPI_SUCCESS, members = 0;
  int64_t color_seen = 0;
  const char* broken = NULL;
  uint64_t round = 0;
  char error[kMessageBytes];
  *newcomm = 0;
  if (jmpi_split_round(per_process, e->num_processes, e->timeout_s, color, key, exchange_pairs,
                       processes_comm, all, &slot, &round, error, sizeof error) != 0) {
    e->raise_abort(error);  /* the other processes stop too */
    rc = fail(JMPI_ERR_OTHER, "%s", error);
  } else if ((broken = broken_group(all, n, per_process, &color_seen, &members)) != NULL) {
    /* every process finds the same from the same round; processes at odds also stop (a loss
     * leaves the survivors' world whole: the program may go on over the live devices) */
    rc = refuse_split(color_seen, members, broken);
    if (!lacks_processes()) e->raise_abort(last_message);
  } else {
    rc = comm_of_color(world, all, color, e->my_process * per_process + slot, round, newcomm);
    if (rc == JMPI_SUCCESS && *newcomm != 0) ((JmpiComm*)*newcomm)->xla_group = 1;
    if (rc == JMPI_SUCCESS) rc = check_after_loss(newcomm, round);
  }
  free(all);
  if (rc != JMPI_SUCCESS) remember_split_failure();
  return rc;
}

JMPI_EXPORT void jaccl_mpiabi_recoverable(void) { atomic_store(&recoverable, 1); }

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
static int in_world(int64_t id) {
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
  return renew_problem[0] != '\0' ? fail(JMPI_ERR_OTHER, "%s", renew_problem) : JMPI_SUCCESS;
}

static int world_for_split(void) {
  pthread_mutex_lock(&renew_lock);
  const int rc = attached() == NULL ? last_code : renew_world(atomic_load(&recoverable));
  pthread_mutex_unlock(&renew_lock);
  return rc;
}

static int split_of(const JmpiComm* parent, int color, int key, uintptr_t* newcomm);

/* Collective over `comm`: everyone's (color, key) goes to everyone; the ranks of my color, by
 * key (ties by their rank in `comm`), make the new communicator (split_of()). */
JMPI_EXPORT int MPIABI_Comm_split(uintptr_t comm, int color, int key, uintptr_t* newcomm) {
  if (comm == JMPI_COMM_WORLD && world_for_split() != JMPI_SUCCESS) {
    *newcomm = 0;
    remember_split_failure();
    return last_code;
  }
  if (comm == JMPI_COMM_WORLD && color != JMPI_UNDEFINED && !in_world(color)) {
    /* XLA's color is the group's first device: a group of devices the world lacks (a mesh
     * over a lost process's devices) would otherwise be split without them */
    *newcomm = 0;
    fail(JMPI_ERR_OTHER, "jaccl: XLA makes the communicator of a group led by device %d, "
         "which belongs to no process of jaccl's world (a lost process): run the program over "
         "a mesh of the live devices (multihost_utils.live_devices)", color);
    remember_split_failure();
    return last_code;
  }
  JmpiComm* parent = comm_of(comm);
  if (parent == NULL) return last_code;
  return split_of(parent, color, key, newcomm);
}

/* MPI_Comm_split's work once the world is the one to split: with several devices per process,
 * a split round (split_world()); else everyone's (color, key) to everyone over `parent`, the
 * ranks of my color, by key (ties by their rank in `parent`), making the new communicator (one
 * of MPI_COMM_WORLD: XLA's group). */
static int split_of(const JmpiComm* parent, int color, int key, uintptr_t* newcomm) {
  if (parent->local_devices > 1) return split_world(parent, color, key, newcomm);
  const int n = parent->size;
  int64_t mine[2] = {color, key}, color_seen = 0;
  int members = 0;
  const char* broken = NULL;
  int64_t* all = malloc(2 * (size_t)n * sizeof(int64_t));
  if (all == NULL) return fail(JMPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_split");
  int rc = collective_at(atomic_load(&engine)->kind_all_gather, parent, type_of(JMPI_INT64_T), 0,
                         mine, all, 2, 2 * (size_t)n, kJacclShimSplitSite);
  *newcomm = 0;
  if (rc != JMPI_SUCCESS) {
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
    if (rc == JMPI_SUCCESS && *newcomm != 0 && parent == world_comm) {
      ((JmpiComm*)*newcomm)->xla_group = 1;
      rc = check_after_loss(newcomm, 0);
    }
  }
  free(all);
  if (rc != JMPI_SUCCESS) remember_split_failure();
  return rc;
}

/* A process came back into the world now attached (the interpreter says so: a world with a
 * process started again, built by the others): every communicator XLA made before is split
 * again at its first use, where the process that came back splits MPI_COMM_WORLD for the
 * same group (XLA keeps its communicators; the new process makes every one afresh). */
JMPI_EXPORT void jaccl_mpiabi_came_back(void) {
  atomic_fetch_add(&comebacks, 1);
  jmpi_split_rounds_restart();  /* with several devices per process: counted as it counts them */
}

/* XLA's communicator `c`, made before a process came back, at its first use since: the split
 * XLA made it with, again (split_of() over MPI_COMM_WORLD with color: the group's first device,
 * key: this rank), with the process that came back splitting for the first time; the group
 * must come out the same, and takes the new split round's number (the communicator's name in
 * the engine, with several devices per process). */
static int split_again(JmpiComm* c) {
  const unsigned now = atomic_load(&comebacks);
  uintptr_t made = 0;
  if (split_of(world_comm, (int)c->devices[0], c->rank, &made) != JMPI_SUCCESS) return last_code;
  JmpiComm* again = (JmpiComm*)made;
  const int same = again != NULL && again->size == c->size && again->rank == c->rank &&
                   memcmp(again->devices, c->devices, (size_t)c->size * sizeof(int64_t)) == 0;
  if (same) c->split_round = again->split_round;
  free(again);
  if (!same) {
    return fail(JMPI_ERR_OTHER, "jaccl: XLA's communicator of devices led by device %lld, made "
                "before a process came back, is not the group the processes made again (the "
                "process that came back runs another program?)", (long long)c->devices[0]);
  }
  c->comebacks = now;
  return JMPI_SUCCESS;
}

/* Whether XLA's communicator `c` has a device that the world attached lacks. */
static int outside_world(const JmpiComm* c) {
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
static int world_for_use(JmpiComm* c) {
  pthread_mutex_lock(&renew_lock);
  int rc = renew_world(outside_world(c));
  if (rc == JMPI_SUCCESS && outside_world(c)) {
    rc = fail(JMPI_ERR_OTHER, "jaccl: XLA's communicator of devices led by device %lld has "
              "devices outside jaccl's world (their processes were lost and are not live "
              "again): run the program over a mesh of the live devices", (long long)c->devices[0]);
  }
  if (rc == JMPI_SUCCESS) c->inside = atomic_load(&attaches);
  pthread_mutex_unlock(&renew_lock);
  return rc;
}

/* The communicator of a collective or transfer XLA runs on `handle` (comm_of()): in a job that
 * recovers, first the world it needs (world_for_use()), then the communicator split again where
 * a process came back since it was made; elsewhere the world never changes (nothing to ask on
 * every call). */
static JmpiComm* comm_in_use(uintptr_t handle) {
  JmpiComm* c = comm_of(handle);
  if (c == NULL || !c->xla_group || !atomic_load(&recoverable)) return c;
  if ((atomic_load(&engine)->world_failed() || c->inside != atomic_load(&attaches)) &&
      world_for_use(c) != JMPI_SUCCESS) {
    return NULL;
  }
  if (c->comebacks != atomic_load(&comebacks) && split_again(c) != JMPI_SUCCESS) return NULL;
  return c;
}

JMPI_EXPORT int MPIABI_Comm_dup(uintptr_t comm, uintptr_t* newcomm) {
  JmpiComm* c = comm_of(comm);
  if (c == NULL) return last_code;
  JmpiComm* d = new_comm(c->rank, c->size);
  if (d == NULL) return fail(JMPI_ERR_NO_MEM, "jaccl: out of memory in MPI_Comm_dup");
  memcpy(d->devices, c->devices, (size_t)c->size * sizeof(int64_t));
  d->local_devices = c->local_devices;
  d->split_round = c->split_round;
  *newcomm = (uintptr_t)d;
  return JMPI_SUCCESS;
}

JMPI_EXPORT int MPIABI_Comm_free(uintptr_t* comm) {
  if (*comm != JMPI_COMM_WORLD && *comm != JMPI_COMM_SELF && *comm != 0) {
    JmpiComm* c = (JmpiComm*)*comm;
    if (*comm < 0x10000 || c->magic != kCommMagic) {
      return fail(JMPI_ERR_COMM, "jaccl: MPI_Comm_free of %#lx, not a communicator",
                  (unsigned long)*comm);
    }
    c->magic = 0;
    free(c);
  }
  *comm = 0;
  return JMPI_SUCCESS;
}

/* ---- collectives (out of place, as XLA calls them) ---- */

/* XLA's collectives this process has run here (all-reduces, all-gathers, reduce-scatters,
 * all-to-all rounds, collective-permute requests): jax_jaccl.testing tells a test whose
 * jax.lax ran on jaccl's engine so (jax_jaccl/_xla_collectives.py: served()). */
static atomic_ulong served;

JMPI_EXPORT unsigned long jaccl_mpiabi_served(void) { return atomic_load(&served); }

/* XLA:CPU narrows a collective's element count (a size_t) to MPI's int: 2^31 to 2^32 - 1
 * elements arrive negative and are refused here, naming the count they were; 2^32 elements or
 * more arrive as the count modulo 2^32, which nothing here can tell from a real one
 * (docs/xla-collectives.md). */
static int refuse_wrapped_count(const char* name, int count) {
  return fail(JMPI_ERR_COUNT, "jaccl: %s of %u elements (%d once XLA made it an MPI int): XLA's "
              "collectives carry element counts as 32-bit ints, so one of 2^31 elements or more "
              "cannot run on them; split the array", name, (unsigned)count, count);
}

JMPI_EXPORT int MPIABI_Allreduce(const void* send, void* recv, int count, uintptr_t datatype,
                                 uintptr_t op, uintptr_t comm) {
  if (count < 0) return refuse_wrapped_count("MPI_Allreduce", count);
  atomic_fetch_add(&served, 1);
  JmpiComm* c = comm_in_use(comm);
  const JmpiType* type = c ? type_of(datatype) : NULL;
  int32_t code = 0;  /* set by op_of when it succeeds */
  if (type == NULL || op_of(op, type, &code) != JMPI_SUCCESS) return last_code;
  const void* in = send == JMPI_IN_PLACE ? recv : send;
  return collective(atomic_load(&engine)->kind_all_reduce, c, type, code, in, recv,
                    (size_t)count, (size_t)count);
}

static int reduce_scatter(const char* name, const void* send, void* recv, int count,
                          uintptr_t datatype, uintptr_t op, uintptr_t comm) {
  if (count < 0) return refuse_wrapped_count(name, count);
  atomic_fetch_add(&served, 1);
  JmpiComm* c = comm_in_use(comm);
  const JmpiType* type = c ? type_of(datatype) : NULL;
  int32_t code = 0;  /* set by op_of when it succeeds */
  if (type == NULL || op_of(op, type, &code) != JMPI_SUCCESS) return last_code;
  if (send == JMPI_IN_PLACE) return fail(JMPI_ERR_ARG, "jaccl: %s with MPI_IN_PLACE", name);
  return collective(atomic_load(&engine)->kind_reduce_scatter, c, type, code, send, recv,
                    (size_t)count * (size_t)c->size, (size_t)count);
}

JMPI_EXPORT int MPIABI_Reduce_scatter_block(const void* send, void* recv, int count,
                                            uintptr_t datatype, uintptr_t op, uintptr_t comm) {
  return reduce_scatter("MPI_Reduce_scatter_block", send, recv, count, datatype, op, comm);
}

/* XLA's counts are all equal (a reduce-scatter of equal blocks); others are refused. */
JMPI_EXPORT int MPIABI_Reduce_scatter(const void* send, void* recv, const int counts[],
                                      uintptr_t datatype, uintptr_t op, uintptr_t comm) {
  JmpiComm* c = comm_in_use(comm);
  if (c == NULL) return last_code;
  for (int r = 1; r < c->size; ++r) {
    if (counts[r] != counts[0]) {
      return fail(JMPI_ERR_COUNT, "jaccl: MPI_Reduce_scatter with unequal counts (%d for rank 0, "
                  "%d for rank %d) is not supported", counts[0], counts[r], r);
    }
  }
  return reduce_scatter("MPI_Reduce_scatter", send, recv, counts[0], datatype, op, comm);
}

JMPI_EXPORT int MPIABI_Allgather(const void* send, int send_count, uintptr_t send_type,
                                 void* recv, int recv_count, uintptr_t recv_type, uintptr_t comm) {
  if (send_count < 0) return refuse_wrapped_count("MPI_Allgather", send_count);
  atomic_fetch_add(&served, 1);
  JmpiComm* c = comm_in_use(comm);
  const JmpiType* type = c ? type_of(send_type) : NULL;
  if (type == NULL) return last_code;
  if (send_type != recv_type || send_count != recv_count || send == JMPI_IN_PLACE) {
    return fail(JMPI_ERR_ARG, "jaccl: MPI_Allgather needs equal send and receive types and "
                "counts, out of place (got %d and %d elements)", send_count, recv_count);
  }
  return collective(atomic_load(&engine)->kind_all_gather, c, type, 0, send, recv,
                    (size_t)send_count, (size_t)send_count * (size_t)c->size);
}

JMPI_EXPORT int MPIABI_Barrier(uintptr_t comm) {
  JmpiComm* c = comm_in_use(comm);
  if (c == NULL) return last_code;
  int32_t in = 0, out = 0;
  return collective(atomic_load(&engine)->kind_all_reduce, c, type_of(JMPI_INT32_T), ops[0].code,
                    &in, &out, 1, 1);
}

/* ---- point to point ---- */

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
  JacclHostP2p call = {my_device(c), c->devices, (size_t)c->size, sends, num_sends, receives,
                       num_receives, kJacclXlaCollectives, c->split_round};
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
