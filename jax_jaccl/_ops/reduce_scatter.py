"""jaccl.reduce_scatter: jax.lax.psum_scatter over mesh axes, computed by the jaccl engine.
Rules in a row, then the registration block.
"""

from __future__ import annotations

import math

import jax
from jax.interpreters import ad, batching, mlir

from .. import _compat
from .._compat import Primitive
from .._ext import PLATFORMS
from .._codes import ALGORITHMS, REDUCE_OPS, REDUCE_SCATTER_ALGORITHMS
from . import _common


def reduce_scatter(x, axis_name, *, scatter_dimension: int = 0, tiled: bool = False,
                   op: str = "sum", algorithm: str = "auto", axis_index_groups=None):
    """Reduces `x` over `axis_name` and leaves member i of each group with block i of the result
    along `scatter_dimension` (jax.lax.psum_scatter semantics). Untiled, that dimension must
    equal the group size and is removed; tiled, it must be divisible by it and shrinks.

    algorithm: 'auto' (mesh: every member sends each block straight to its owner; for integer
    types, hierarchical when the group spans hosts with several ranks on each), 'mesh', 'ring' (bidirectional),
    'ring_oneway' or 'hierarchical' (asked for where the groups lack its layout: a ValueError as
    the program is traced). axis_index_groups: as jax.lax's (each group reduces and scatters
    among itself).
    """
    axes = _common.normalize_axes(axis_name)
    _common.check_choice(op, REDUCE_OPS, "op", "reduce_scatter")
    _common.check_choice(algorithm, REDUCE_SCATTER_ALGORITHMS, "algorithm", "reduce_scatter")

    def bind(leaf):
        leaf = leaf if isinstance(leaf, _compat.Tracer) else jax.numpy.asarray(leaf)
        _common.check_dtype(leaf.dtype, "reduce_scatter", op)
        if _compat.reduced_or_unreduced(leaf, axes) and op == "sum":  # jax.lax's own op there
            return _compat.lax_parallel.psum_scatter(
                leaf, axes, scatter_dimension=scatter_dimension, tiled=tiled,
                axis_index_groups=axis_index_groups)
        if _common.vmap_axes(axes):
            if op != "sum":
                raise NotImplementedError(f"jaccl.reduce_scatter: op={op!r} over a jax.vmap axis "
                                          "(jax.lax.psum_scatter sums only)")
            return _common.over_vmap_axes(axes, axis_index_groups, "reduce_scatter", lambda a: (
                _compat.lax_parallel.psum_scatter(leaf, a, scatter_dimension=scatter_dimension,
                                                  tiled=tiled)))
        size = _common.check_axes(axes, "reduce_scatter")
        groups = _common.index_groups(axis_index_groups, size, "reduce_scatter")
        size = len(groups[0]) if groups else size
        if leaf.ndim == 0:
            raise ValueError("jaccl.reduce_scatter: x must have at least one dimension")
        dim = _common.canonical_axis(scatter_dimension, leaf.ndim, "scatter_dimension",
                                     "reduce_scatter")
        n = leaf.shape[dim]
        if tiled and n % size:
            raise ValueError(
                f"jaccl.reduce_scatter: dimension {dim} of x has size {n}, which the group size "
                f"{size} of axis {axis_name!r} does not divide; pad it to a multiple of {size}")
        if not tiled and n != size:
            raise ValueError(
                f"jaccl.reduce_scatter: with tiled=False dimension {dim} of x must equal the group "
                f"size {size} of axis {axis_name!r}, got {n}; use tiled=True to split it")
        leaf, restore = _common.to_engine(leaf, reduces=True)
        leaf = _compat.make_varying(leaf, axes)
        return restore(reduce_scatter_p.bind(leaf, axes=axes, scatter_dimension=dim, tiled=tiled,
                                             op=op, algorithm=algorithm, axis_size=size,
                                             groups=groups))

    return jax.tree_util.tree_map(bind, x)


def _abstract_eval(x, *, axes, scatter_dimension, tiled, op, algorithm, axis_size, groups):
    shape = list(x.shape)
    if tiled:
        shape[scatter_dimension] //= axis_size
    else:
        del shape[scatter_dimension]
    return (_compat.with_varying(x, _compat.varying_axes(x), shape=tuple(shape)),
            _common.collective_effects(axes))


def _lowering(ctx, x, *, axes, scatter_dimension, tiled, op, algorithm, axis_size, groups):
    (aval,) = ctx.avals_in
    _common.refuse_unfit_algorithm("reduce_scatter", algorithm, ctx, axes, groups)
    return _common.lower_collective(
        ctx, x, target="jaccl_reduce_scatter", axes=axes, groups=groups, op=REDUCE_OPS[op],
        algorithm=ALGORITHMS[algorithm], outer=math.prod(aval.shape[:scatter_dimension]))


def _transpose(ct, x, *, axes, scatter_dimension, tiled, op, algorithm, axis_size, groups):
    if op != "sum":
        raise NotImplementedError("jaccl.reduce_scatter: differentiation needs op='sum'")
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)]
    from .all_gather import all_gather_p

    return [all_gather_p.bind(ct, axes=axes, axis=scatter_dimension, tiled=tiled,
                              algorithm="auto", axis_size=axis_size, groups=groups)]


def _jvp(primals, tangents, **params):
    if params["op"] != "sum":
        raise NotImplementedError(
            f"jaccl.reduce_scatter: differentiation is defined for op='sum' only, not {params['op']!r}")
    (x,), (t,) = primals, tangents
    y = reduce_scatter_p.bind(x, **params)
    if type(t) is ad.Zero:
        return y, ad.Zero(jax.typeof(y).to_tangent_aval())
    return y, reduce_scatter_p.bind(t, **params)


def _batcher(axis_data, vals_in, dims_in, *, axes, scatter_dimension, tiled, **params):
    _common.refuse_vmap_axis(axis_data, axes, "reduce_scatter")
    (x,), (d,) = vals_in, dims_in
    if d is None:
        return reduce_scatter_p.bind(x, axes=axes, scatter_dimension=scatter_dimension,
                                     tiled=tiled, **params), d
    if d <= scatter_dimension:
        scatter_dimension += 1
    elif not tiled:
        d -= 1  # the scatter dimension before d disappears
    return reduce_scatter_p.bind(x, axes=axes, scatter_dimension=scatter_dimension, tiled=tiled,
                                 **params), d


def _impl(x, **params):
    raise ValueError("jaccl.reduce_scatter must be called inside jax.shard_map")


reduce_scatter_p = Primitive("jaccl_reduce_scatter")
reduce_scatter_p.def_impl(_impl)
reduce_scatter_p.def_effectful_abstract_eval(_abstract_eval)
for _platform in PLATFORMS:
    mlir.register_lowering(reduce_scatter_p, _common.widened_as_xla_cpu_reduces(_lowering)
                           if _platform == "cpu" else _lowering, platform=_platform, cacheable=False)
ad.primitive_jvps[reduce_scatter_p] = _jvp
ad.primitive_transposes[reduce_scatter_p] = _transpose
batching.fancy_primitive_batchers[reduce_scatter_p] = _batcher
