"""Loads the compiled engine and registers its FFI handlers with XLA: the CPU ones always,
the CUDA ones when the package was built with CUDA (they run on GPUs, staging through the
same engine). Handlers are stateless, so registering at import is safe (even before
jax.distributed.initialize()); nothing here touches a GPU.
"""

import jax

from . import _jaccl

engine = _jaccl

for _name, _capsule in _jaccl.registrations().items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")

try:
    from . import _jaccl_cuda as cuda_engine
except ImportError:  # built without CUDA
    cuda_engine = None

if cuda_engine is not None:
    cuda_engine.set_engine(_jaccl.engine_api(), _jaccl.engine_moe_api(), _jaccl.engine_abort_api())
    for _name, _capsule in cuda_engine.registrations().items():
        jax.ffi.register_ffi_target(_name, _capsule, platform="CUDA")

PLATFORMS = ("cpu", "cuda") if cuda_engine is not None else ("cpu",)
