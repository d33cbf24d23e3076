"""Loads the compiled engine and registers its FFI handlers with XLA: the CPU ones always,
the CUDA ones when the package was built with CUDA (they run on GPUs, staging through the
same engine). Handlers are stateless, so registering at import is safe (even before
jax.distributed.initialize()); nothing here touches a GPU.
"""

import jax

from . import _jaccl

engine = _jaccl

# platform -> the FFI targets registered for it
TARGETS = {"cpu": set(_jaccl.registrations())}

for _name, _capsule in _jaccl.registrations().items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")

try:
    from . import _jaccl_cuda as cuda_engine
except ImportError:  # built without CUDA
    cuda_engine = None

if cuda_engine is not None:
    cuda_engine.set_engine(_jaccl.engine_api(), _jaccl.engine_moe_api(), _jaccl.engine_abort_api())
    TARGETS["cuda"] = set(cuda_engine.registrations())
    for _name, _capsule in cuda_engine.registrations().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")

PLATFORMS = ("cpu", "cuda") if cuda_engine is not None else ("cpu",)


def platforms_for(target: str) -> tuple:
    """The platforms whose extension has a handler for `target` (elsewhere jax reports that
    the op has no lowering for the platform)."""
    return tuple(p for p in PLATFORMS if target in TARGETS[p])
