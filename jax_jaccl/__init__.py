"""jax_jaccl: fast collectives for JAX as XLA FFI primitives.

Use inside jax.shard_map, like the jax.lax collectives they replace:

    import jax_jaccl as jaccl
    g = jaccl.reduce_scatter(grads, "data", tiled=True)
    p = jaccl.all_gather(params, "data", tiled=True)

or, with jax.lax's names and semantics: `from jax_jaccl import lax`.
"""

import importlib
import pkgutil

# An editable install (`make setup`) keeps the compiled modules in site-packages and finds them
# through an import hook that a .pth file installs. A process started with site-packages already
# on its PYTHONPATH (jax's multi-process test harness passes its sys.path that way) skips .pth
# files and loads this package from the checkout alone; the package then looks for its other
# half on sys.path itself. A plain install has one folder, and this adds nothing.
__path__ = pkgutil.extend_path(__path__, __name__)

# Public name -> the module that defines it. Imported on first use (PEP 562), so that importing
# the package, or its pytest plugin (jax_jaccl.testing, loaded by every pytest session where
# jax_jaccl is installed), does not import jax or load the engine; the first public name used
# loads the engine and registers its FFI handlers (_ext), before any op can be traced.
_DEFINED_IN = {
    "WorldInfo": "._bootstrap", "init": "._bootstrap", "is_initialized": "._bootstrap",
    "shutdown": "._bootstrap",
    "all_gather": "._ops.all_gather", "all_reduce": "._ops.all_reduce",
    "all_to_all": "._ops.all_to_all", "MoeHandle": "._ops.moe", "moe_combine": "._ops.moe",
    "moe_dispatch": "._ops.moe", "ppermute": "._ops.ppermute",
    "ragged_all_to_all": "._ops.ragged_all_to_all", "reduce_scatter": "._ops.reduce_scatter",
    "Fp8Rows": "._ops.fp8", "quantize_fp8": "._ops.fp8", "dequantize_fp8": "._ops.fp8",
    "lax": ".lax",
}


# Submodules a user reaches as attributes (`jax_jaccl.distributed.initialize()`), imported as
# they are, before the engine (initialize() must come before any other JAX call).
_SUBMODULES = ("distributed",)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name not in _DEFINED_IN:
        raise AttributeError(f"module 'jax_jaccl' has no attribute {name!r}")
    importlib.import_module("._ext", __name__)
    module = importlib.import_module(_DEFINED_IN[name], __name__)
    value = module if name == "lax" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_DEFINED_IN) | set(_SUBMODULES))


__version__ = "0.1.0"

__all__ = sorted(_DEFINED_IN)
