"""XLA:CPU's own collectives on jaccl's engine: unchanged JAX programs (jit with shardings,
jax.lax collectives) whose all-reduces, all-gathers, reduce-scatters, all-to-alls and
collective-permutes run on jaccl instead of gloo.

How: jaxlib links MPItrampoline, which at `import jax` loads the library MPITRAMPOLINE_LIB
names; with JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi and jax.distributed initialised, XLA:CPU
sends every collective there. jaccl's mpiabi library (libjaccl_mpiabi.so, xla_ffi/mpiabi) implements
those calls on the engine _jaccl owns, once attach() has handed it over.

Contract:
- resolve(requested, processes, devices_per_process) is "jaccl" or "gloo" for a job (a
  launcher's default when `requested` is None); ValueError when jaccl cannot carry it.
- environment() is what a launcher adds to a process's environment (before Python starts);
  choose(env, "jaccl" | "gloo") sets a process's environment up for either.
- loaded() tells whether this process's jaxlib loaded jaccl's mpiabi library; active() whether XLA's
  CPU collectives will also use it (the 'mpi' implementation is selected).
- expect(process_id, num_processes) runs before the CPU backend exists (XLA asks the mpiabi library
  for its world rank right after MPI_Init_thread); attach() runs after jaccl's world is up (made
  with shared channels when the process has several CPU devices: shares_channels()), raises
  ValueError with the reason when it cannot.
- recoverable() tells the mpiabi library that the job recovers from lost processes (JAX's
  recoverability): before each split of MPI_COMM_WORLD it asks for a world with processes that
  came back (_bootstrap.renew_with_those_back()).
- came_back() tells the mpiabi library that the world just attached has a process that came back
  (started again): XLA's communicators made before are split again at their first use, as
  that process makes its own.
- refuse(reason) hands the mpiabi library the error of the collective it attaches for (the start of
  jaccl that _bootstrap.attach_on_first_use() tried on its behalf failed); renew_failed(reason)
  the error of the communicator XLA makes after a lost process, when
  _bootstrap.renew_after_loss() could not build the survivors' world; group_refused(reason)
  that of a communicator made after a lost process that _xla_groups refuses.
- served() is how many of XLA's collectives this process has run on the mpiabi library.
- unplanned_devices(n) is why a process of n CPU devices keeps XLA's collectives on gloo
  though its launcher put them on jaccl for another count (resolve()'s default), or "".
- shares_channels(local_devices) is whether jaccl's world must share its channels among
  communicators (comm/world.h): XLA's collectives on it with several CPU devices per process.
- problem() is why XLA's collectives will not run on jaccl though the launcher asked for it
  (JACCL_XLA_COLLECTIVES=jaccl, _settings.launch()), or None.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

LIBRARY_NAME = "libjaccl_mpiabi.so"


def library_path() -> str:
    """Installed beside the _jaccl extension (an editable install keeps both in site-packages);
    found without loading either (the pytest plugin asks in pytest's own process)."""
    import importlib.util

    extension = Path(importlib.util.find_spec("jax_jaccl._jaccl").origin).resolve()
    return str(extension.parent / LIBRARY_NAME)


# What environment() sets (jaccl-run passes them to hosts it reaches by ssh).
VARIABLES = ("MPITRAMPOLINE_LIB", "JAX_CPU_COLLECTIVES_IMPLEMENTATION", "JACCL_XLA_COLLECTIVES")


def environment() -> dict:
    return dict(zip(VARIABLES, (library_path(), "mpi", "jaccl")))


def resolve(requested: str | None, processes: int, devices_per_process: int) -> str:
    """What carries XLA's collectives in a job of `processes` x `devices_per_process` CPU
    devices, as jaccl-run and the pytest plugin choose: `requested` ("jaccl" or "gloo"), or by
    default jaccl for several processes of one device each, else gloo. Several devices per
    process run on jaccl when asked: there XLA caches each process's communicators apart, and
    a program whose meshes order a process's devices differently fails (docs/xla-collectives.md).
    ValueError for another name."""
    if requested not in (None, "jaccl", "gloo"):
        raise ValueError(f"XLA's collectives run on 'jaccl' or 'gloo', not {requested!r}")
    if requested is None:
        return "jaccl" if devices_per_process == 1 and processes > 1 else "gloo"
    return requested


def choose(env: dict, xla_collectives: str) -> None:
    """Sets up `env`, a process's environment to be, for XLA's collectives on "jaccl" or on
    "gloo": for gloo it drops what environment() would have set (inherited, e.g. by a job
    started from inside another), leaving a user's own MPITRAMPOLINE_LIB alone."""
    if xla_collectives == "jaccl":
        env.update(environment())
        return
    if env.get("MPITRAMPOLINE_LIB") == library_path():
        env.pop("MPITRAMPOLINE_LIB")
        env.pop("JAX_CPU_COLLECTIVES_IMPLEMENTATION", None)
    env["JACCL_XLA_COLLECTIVES"] = "gloo"


def _handle():
    """The loaded mpiabi library, or None (RTLD_NOLOAD: never loads it here)."""
    try:
        return ctypes.CDLL(library_path(), mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
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
        return (f"jaxlib did not load jaccl's mpiabi library (MPITRAMPOLINE_LIB={where!r}, "
                f"expected {library_path()!r}; it must be set before jax is imported)")
    import jax

    if jax.config.jax_cpu_collectives_implementation != "mpi":
        return ("jax_cpu_collectives_implementation is "
                f"{jax.config.jax_cpu_collectives_implementation!r}, not 'mpi'")
    return None


def unplanned_devices(local_devices: int | None) -> str:
    from . import _settings

    planned = _settings.launch().local_devices
    if not local_devices or local_devices <= 1 or not planned or planned == local_devices:
        return ""
    if not active():
        return ""
    return (f"this process asks for {local_devices} CPU devices, its launcher planned {planned}; "
            f"start it with --devices-per-process {local_devices} --xla-collectives jaccl to "
            "run them on jaccl")


def shares_channels(local_devices: int) -> bool:
    return local_devices > 1 and active()


def expect(process_id: int, num_processes: int) -> None:
    lib = _handle()
    if lib is not None:
        lib.jaccl_mpiabi_expect(int(process_id), int(num_processes))


def attach() -> None:
    from . import _ext

    _ext.engine.mpiabi_attach(library_path())


def recoverable() -> None:
    lib = _handle()
    if lib is not None:
        lib.jaccl_mpiabi_recoverable()


def came_back() -> None:
    lib = _handle()
    if lib is not None:
        lib.jaccl_mpiabi_came_back()


def renew_failed(reason: str) -> None:
    """Hands `reason` to the mpiabi library as the error of the communicator XLA is making, for
    which _bootstrap.renew_after_loss() could not build the survivors' world."""
    lib = _handle()
    if lib is not None:
        lib.jaccl_mpiabi_renew_failed(reason.encode(errors="replace"))


def group_refused(reason: str) -> None:
    """Hands `reason` to the mpiabi library as the error of the communicator XLA is making after a
    lost process, which _xla_groups.split_after_loss() refuses."""
    lib = _handle()
    if lib is not None:
        lib.jaccl_mpiabi_group_refused(reason.encode(errors="replace"))


def served() -> int:
    """How many of XLA's collectives this process has run on jaccl's mpiabi library (0 without
    it)."""
    lib = _handle()
    if lib is None:
        return 0
    lib.jaccl_mpiabi_served.restype = ctypes.c_ulong
    return int(lib.jaccl_mpiabi_served())


def refuse(reason: str) -> None:
    """Hands `reason` to the mpiabi library as the error of the collective it is attaching for."""
    lib = _handle()
    if lib is not None:
        lib.jaccl_mpiabi_refuse(reason.encode(errors="replace"))
