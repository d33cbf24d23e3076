"""Loads the compiled engine and registers its FFI handlers with XLA (CPU).

Handlers are stateless, so registering at import is safe (even before
jax.distributed.initialize()).
"""

import jax

from . import _jaccl

TARGETS = {}

for _name, _capsule in _jaccl.registrations().items():
    jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")
    TARGETS[_name] = _capsule

engine = _jaccl
