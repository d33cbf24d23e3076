/* The shim's internal interface between its generated half (mpiabi_exports.c: constants and
 * stubs) and its hand-written half (shim.c and its neighbours: the calls XLA:CPU makes).
 *
 * Contract: jmpi_unsupported() records, for this thread, that an MPI function jaccl does not
 * implement was called; MPI_Error_string then names it. */
#ifndef JACCL_MPIABI_SHIM_H
#define JACCL_MPIABI_SHIM_H

/* The versions the trampoline reads: MPItrampoline's ABI 2.9 (5.3.1, in jaxlib 0.10 to 0.12),
 * and this wrapper's own version (jaccl's shim, not an MPIwrapper). */
#define JMPI_VERSION_MPIABI_VERSION_MAJOR 2
#define JMPI_VERSION_MPIABI_VERSION_MINOR 9
#define JMPI_VERSION_MPIABI_VERSION_PATCH 0
#define JMPI_VERSION_MPIWRAPPER_VERSION_MAJOR 0
#define JMPI_VERSION_MPIWRAPPER_VERSION_MINOR 1
#define JMPI_VERSION_MPIWRAPPER_VERSION_PATCH 0

void jmpi_unsupported(const char* function);

#endif
