"""jax_jaccl: fast collectives for JAX as XLA FFI primitives.

Use inside jax.shard_map, like the jax.lax collectives they replace:

    import jax_jaccl as jaccl
    g = jaccl.reduce_scatter(grads, "data", tiled=True)
    p = jaccl.all_gather(params, "data", tiled=True)

or, with jax.lax's names and semantics: `from jax_jaccl import lax`.
"""

from . import _ext  # noqa: F401  (registers the FFI handlers)
from . import lax
from ._bootstrap import WorldInfo, init, is_initialized, shutdown
from ._ops.all_gather import all_gather
from ._ops.all_reduce import all_reduce
from ._ops.all_to_all import all_to_all
from ._ops.moe import MoeHandle, moe_combine, moe_dispatch
from ._ops.ppermute import ppermute
from ._ops.ragged_all_to_all import ragged_all_to_all
from ._ops.reduce_scatter import reduce_scatter

__version__ = "0.1.0"

__all__ = [
    "MoeHandle",
    "WorldInfo",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "init",
    "is_initialized",
    "lax",
    "moe_combine",
    "moe_dispatch",
    "ppermute",
    "ragged_all_to_all",
    "reduce_scatter",
    "shutdown",
]
