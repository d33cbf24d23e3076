"""XLA:CPU's own collectives on jaccl's engine: unchanged JAX programs (jit with shardings,
jax.lax collectives) whose all-reduces, all-gathers, reduce-scatters, all-to-alls and
collective-permutes run on jaccl instead of gloo.

How: jaxlib links MPItrampoline, which at `import jax` loads the library MPITRAMPOLINE_LIB
names; with JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi and jax.distributed initialised, XLA:CPU
sends every collective there. jaccl's shim (libjaccl_mpiabi.so, xla_ffi/mpiabi) implements
those calls on the engine _jaccl owns, once attach() has handed it over.

Contract:
- environment() is what a launcher adds to a process's environment (before Python starts).
- loaded() tells whether this process's jaxlib loaded jaccl's shim; active() whether XLA's
  CPU collectives will also use it (the 'mpi' implementation is selected).
- expect(process_id, num_processes) runs before the CPU backend exists (XLA asks the shim for
  its world rank right after MPI_Init_thread); attach() runs after jaccl's world is up, raises
  ValueError with the reason when it cannot (e.g. several CPU devices per process).
- problem() is why XLA's collectives will not run on jaccl though the launcher asked for it
  (JACCL_XLA_COLLECTIVES=jaccl, _settings.launch()), or None.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

SHIM_NAME = "libjaccl_mpiabi.so"


def shim_path() -> str:
    """Installed beside the _jaccl extension (an editable install keeps both in site-packages)."""
    from . import _jaccl

    return str(Path(_jaccl.__file__).resolve().parent / SHIM_NAME)


def environment() -> dict:
    return {"MPITRAMPOLINE_LIB": shim_path(), "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi",
            "JACCL_XLA_COLLECTIVES": "jaccl"}


def _handle():
    """The loaded shim, or None (RTLD_NOLOAD: never loads it here)."""
    try:
        return ctypes.CDLL(shim_path(), mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
    except OSError:
        return None


def loaded() -> bool:
    return _handle() is not None


def active() -> bool:
    import jax

    return loaded() and jax.config.jax_cpu_collectives_implementation == "mpi"


def problem() -> str | None:
    from . import _settings

    if _settings.launch().xla_collectives != "jaccl":
        return None
    if not loaded():
        where = os.environ.get("MPITRAMPOLINE_LIB", "")
        return (f"jaxlib did not load jaccl's MPI shim (MPITRAMPOLINE_LIB={where!r}, expected "
                f"{shim_path()!r}; it must be set before jax is imported)")
    import jax

    if jax.config.jax_cpu_collectives_implementation != "mpi":
        return ("jax_cpu_collectives_implementation is "
                f"{jax.config.jax_cpu_collectives_implementation!r}, not 'mpi'")
    return None


def expect(process_id: int, num_processes: int) -> None:
    shim = _handle()
    if shim is not None:
        shim.jaccl_mpiabi_expect(int(process_id), int(num_processes))


def attach() -> None:
    from . import _ext

    _ext.engine.mpiabi_attach(shim_path())
