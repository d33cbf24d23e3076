"""jax_jaccl: fast collectives for JAX as XLA FFI primitives.

Use inside jax.shard_map, like the jax.lax collectives they replace:

    import jax_jaccl as jaccl
    g = jaccl.reduce_scatter(grads, "data", tiled=True)
    p = jaccl.all_gather(params, "data", tiled=True)
"""

from . import _ext  # noqa: F401  (registers the FFI handlers)
from .bootstrap import WorldInfo, init, is_initialized, shutdown
from .ops.all_gather import all_gather
from .ops.all_reduce import all_reduce
from .ops.all_to_all import all_to_all
from .ops.moe import MoeHandle, moe_combine, moe_dispatch
from .ops.reduce_scatter import reduce_scatter

__version__ = "0.1.0"

__all__ = [
    "MoeHandle",
    "WorldInfo",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "init",
    "is_initialized",
    "moe_combine",
    "moe_dispatch",
    "reduce_scatter",
    "shutdown",
]
