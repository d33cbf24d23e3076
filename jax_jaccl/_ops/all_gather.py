"""jaccl.all_gather: jax.lax.all_gather over mesh axes, computed by the jaccl engine.
Rules in a row, then the registration block.
"""

from __future__ import annotations

import math

import jax
from jax.interpreters import ad, batching, mlir

from .. import _compat
from .._compat import Primitive
from .._ext import PLATFORMS
from .._codes import ALGORITHMS, ALL_GATHER_ALGORITHMS
from . import _common


def all_gather(x, axis_name, *, axis: int = 0, tiled: bool = False, algorithm: str = "auto",
               axis_index_groups=None):
    """Gathers `x` from every member of the group (jax.lax.all_gather semantics): untiled, a new
    dimension of the group size is inserted at `axis`; tiled, the members' arrays are
    concatenated along `axis`. Member i's data is block i.

    algorithm: 'auto' (= 'mesh': every member sends to all others at once), 'mesh', 'ring' or
    'ring_oneway'. axis_index_groups: as jax.lax's (each group gathers among itself).
    """
    axes = _common.normalize_axes(axis_name)
    _common.check_choice(algorithm, ALL_GATHER_ALGORITHMS, "algorithm", "all_gather")

    def bind(leaf):
        leaf = leaf if isinstance(leaf, _compat.Tracer) else jax.numpy.asarray(leaf)
        _common.check_dtype(leaf.dtype, "all_gather")
        if _compat.reduced_or_unreduced(leaf, axes):  # jax.lax's own op there
            return _compat.lax_parallel.all_gather(leaf, axes, axis=axis, tiled=tiled,
                                                   axis_index_groups=axis_index_groups)
        if _common.vmap_axes(axes):
            return _common.over_vmap_axes(axes, axis_index_groups, "all_gather", lambda a: (
                _compat.lax_parallel.all_gather(leaf, a, axis=axis, tiled=tiled)))
        size = _common.check_axes(axes, "all_gather")
        groups = _common.index_groups(axis_index_groups, size, "all_gather")
        size = len(groups[0]) if groups else size
        if tiled and leaf.ndim == 0:
            raise ValueError("jaccl.all_gather: tiled=True needs x with at least one dimension")
        dim = _common.canonical_axis(axis, leaf.ndim if tiled else leaf.ndim + 1, "axis",
                                     "all_gather")
        # the last axis stays last unless a new one is appended after it
        pieces = 1 if tiled or dim < leaf.ndim else None
        return _common.move(lambda v: all_gather_p.bind(
            _compat.make_varying(v, axes), axes=axes, axis=dim, tiled=tiled, algorithm=algorithm,
            axis_size=size, groups=groups), leaf, pieces)

    return jax.tree_util.tree_map(bind, x)


def _abstract_eval(x, *, axes, axis, tiled, algorithm, axis_size, groups):
    shape = list(x.shape)
    if tiled:
        shape[axis] *= axis_size
    else:
        shape.insert(axis, axis_size)
    return (_compat.with_varying(x, _compat.varying_axes(x), shape=tuple(shape)),
            _common.collective_effects(axes))


def _lowering(ctx, x, *, axes, axis, tiled, algorithm, axis_size, groups):
    (aval,) = ctx.avals_in
    return _common.lower_collective(ctx, x, target="jaccl_all_gather", axes=axes, groups=groups,
                                    algorithm=ALGORITHMS[algorithm],
                                    outer=math.prod(aval.shape[:axis]))


def _transpose(ct, x, *, axes, axis, tiled, algorithm, axis_size, groups):
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)]
    from .reduce_scatter import reduce_scatter_p

    return [reduce_scatter_p.bind(ct, axes=axes, scatter_dimension=axis, tiled=tiled, op="sum",
                                  algorithm="auto", axis_size=axis_size, groups=groups)]


def _batcher(axis_data, vals_in, dims_in, *, axes, axis, tiled, **params):
    _common.refuse_vmap_axis(axis_data, axes, "all_gather")
    (x,), (d,) = vals_in, dims_in
    if d is not None:
        if d <= axis:
            axis += 1
        elif not tiled:
            d += 1  # the new gathered dimension sits before d
    return all_gather_p.bind(x, axes=axes, axis=axis, tiled=tiled, **params), d


def _impl(x, **params):
    raise ValueError("jaccl.all_gather must be called inside jax.shard_map")


all_gather_p = Primitive("jaccl_all_gather")
all_gather_p.def_impl(_impl)
all_gather_p.def_effectful_abstract_eval(_abstract_eval)
for _platform in PLATFORMS:
    mlir.register_lowering(all_gather_p, _lowering, platform=_platform, cacheable=False)
ad.deflinear2(all_gather_p, _transpose)
batching.fancy_primitive_batchers[all_gather_p] = _batcher
