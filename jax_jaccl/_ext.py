"""Loads the compiled engine and registers its FFI handlers with XLA: the CPU ones always,
the CUDA ones when the package was built with CUDA (they run on GPUs, staging through the
same engine). A module built with a newer XLA FFI API than the running jax's is an ImportError
saying so (XLA would refuse its handlers at first use, or fail to start its CPU backend).
Handlers are stateless, so registering at import is safe (even before
jax.distributed.initialize()); nothing here touches a GPU. Where JAX has not made its CPU
client yet, it makes room in that client's thread pool for the devices planned (_cpu_pool).
"""

import os
import re

import jax

# libfabric, which the engine links for its OFI transport, loads its PSM providers' libraries
# (libpsm_infinipath, libpsm2), and those catch SIGSEGV and SIGABRT in every process that loads
# them: they print a backtrace, leave a <program>.80s-<pid>,vm.btr file in the working folder and
# call exit(1), so a crash anywhere in the process (XLA, the user's code) ends with status 1, not
# by its signal, and two threads crashing at once deadlock in exit(). Their own switches keep the
# plain signal; set before the libraries load, unless the user set them.
CRASH_HANDLER_SWITCHES = {"IPATH_NO_BACKTRACE": "1", "HFI_NO_BACKTRACE": "1"}
for _name, _value in CRASH_HANDLER_SWITCHES.items():
    os.environ.setdefault(_name, _value)

from . import _cpu_pool, _jaccl  # noqa: E402

# jaxlib < 0.12.1 deadlocks with more CPU devices than its pool of threads holds (_cpu_pool).
_cpu_pool.make_room(_cpu_pool.planned_devices())

engine = _jaccl


def ffi_api_of(include_dir) -> tuple | None:
    """The XLA FFI API version (major, minor) of the headers under `include_dir`; None when
    they are missing."""
    try:
        with open(os.path.join(include_dir, "xla", "ffi", "api", "c_api.h")) as f:
            text = f.read()
    except OSError:
        return None
    found = [re.search(rf"#define XLA_FFI_API_{part} (\d+)", text) for part in ("MAJOR", "MINOR")]
    return None if None in found else tuple(int(m.group(1)) for m in found)


def running_ffi_api() -> tuple | None:
    """The XLA FFI API version of the running jax, from the headers its jaxlib ships."""
    return ffi_api_of(jax.ffi.include_dir())


def check_ffi_api(module: str, built, running) -> None:
    """Raises ImportError, saying what to do, when `module` was built with a newer XLA FFI API
    than the running jax's: XLA would refuse each of its handlers at their first use."""
    if running is None or tuple(built) <= tuple(running):
        return
    raise ImportError(
        f"jax_jaccl's {module} was built with XLA FFI API {'.'.join(map(str, built))} (a newer "
        f"jax's headers), but the installed jax {jax.__version__} has API "
        f"{'.'.join(map(str, running))} and refuses its handlers: build jax_jaccl against the jax "
        f"you run (pip install --no-build-isolation --force-reinstall <its source>), or with "
        f"pip's own build, which uses the oldest supported jax's headers")


check_ffi_api("_jaccl", _jaccl.ffi_api_version(), running_ffi_api())

# platform -> the FFI targets registered for it
TARGETS = {"cpu": set(_jaccl.registrations())}

for _name, _capsule in _jaccl.registrations().items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")

try:
    from . import _jaccl_cuda as cuda_engine
except ImportError:  # built without CUDA
    cuda_engine = None

if cuda_engine is not None:
    check_ffi_api("_jaccl_cuda", cuda_engine.ffi_api_version(), running_ffi_api())
    cuda_engine.set_engine(_jaccl.engine_api(), _jaccl.engine_moe_api(), _jaccl.engine_abort_api())
    TARGETS["cuda"] = set(cuda_engine.registrations())
    for _name, _capsule in cuda_engine.registrations().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")

PLATFORMS = ("cpu", "cuda") if cuda_engine is not None else ("cpu",)


def platforms_for(target: str) -> tuple:
    """The platforms whose extension has a handler for `target` (elsewhere jax reports that
    the op has no lowering for the platform)."""
    return tuple(p for p in PLATFORMS if target in TARGETS[p])
