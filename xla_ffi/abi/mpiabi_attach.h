// Hands this process's engine to the mpiabi library (libjaccl_mpiabi.so) that MPItrampoline loaded
// into jaxlib, so the collectives XLA:CPU emits run on the same world as jaccl's own ops.
//
// Contract: attach_mpiabi(path) needs an initialised world with one device per process (the
// mpiabi library routes by communicator and rank; several CPU devices per process are not supported
// yet); it opens `path` only if it is already loaded (RTLD_NOLOAD: the trampoline's copy) and
// calls its jaccl_mpiabi_attach() once. Throws jaccl::Error naming what is missing.
#pragma once

#include <string>

namespace jaccl {

void attach_mpiabi(const std::string& path);

}  // namespace jaccl
