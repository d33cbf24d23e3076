"""jaccl.ppermute: jax.lax.ppermute (collective permute) over mesh axes, computed by the jaccl
engine: frames travel only between the pairs of the permutation. Rules in a row, then the
registration block.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .. import _compat
from .._ext import platforms_for
from . import _common


def ppermute(x, axis_name, perm):
    """Sends `x` from member `source` to member `dest` of every group for each pair
    (source, dest) of `perm` (jax.lax.ppermute semantics): indices along `axis_name` (over a
    tuple of axes, the flattened index, as jax.lax.axis_index gives it); no two pairs share a
    source or a destination; a member that no pair sends to gets zeros. The result takes the
    input's buffer when XLA can donate it (input_output_aliases).
    """
    axes = _common.normalize_axes(axis_name)
    perm = tuple((int(source), int(dest)) for source, dest in perm)
    sources, dests = [p[0] for p in perm], [p[1] for p in perm]
    if len(set(sources)) != len(sources) or len(set(dests)) != len(dests):
        raise ValueError(f"ppermute sources and destinations must be unique, got {perm}.")

    def bind(leaf):
        leaf = leaf if isinstance(leaf, _compat.Tracer) else jax.numpy.asarray(leaf)
        _common.check_dtype(leaf.dtype, "ppermute")
        if _common.vmap_axes(axes):
            return _common.over_vmap_axes(axes, None, "ppermute",
                                          lambda a: _permute_batch(leaf, a, perm))
        size = _common.check_axes(axes, "ppermute")
        _check_pairs(perm, size, axis_name)
        leaf, pairs = _common.as_real_pairs(leaf)
        leaf = _compat.make_varying(leaf, axes)
        return _common.from_real_pairs(ppermute_p.bind(leaf, axes=axes, perm=perm), pairs)

    return jax.tree_util.tree_map(bind, x)


def _check_pairs(perm, size, axis_name):
    for source, dest in perm:
        if not (0 <= source < size and 0 <= dest < size):
            raise ValueError(f"jaccl.ppermute: pair ({source}, {dest}) of perm is out of range "
                             f"for axis {axis_name!r} of size {size}")


def _permute_batch(x, axis, perm):
    """ppermute over a jax.vmap axis: each batch member takes its source's value (zeros
    without one), a computation on the batch. A full permutation is jax.lax.ppermute's."""
    size = jax.lax.axis_size(axis)
    _check_pairs(perm, size, axis)
    if len(perm) == size:
        return jax.lax.ppermute(x, axis, perm)
    source = np.full((size,), -1, np.int32)
    for s, d in perm:
        source[d] = s
    mine = jax.numpy.asarray(source)[jax.lax.axis_index(axis)]
    everyone = jax.lax.all_gather(x, axis)
    return jax.numpy.where(mine >= 0, everyone[jax.numpy.maximum(mine, 0)],
                           jax.numpy.zeros_like(x))


def _abstract_eval(x, *, axes, perm):
    return _compat.with_varying(x, _compat.varying_axes(x)), _common.collective_effects(axes)


def _lowering(ctx, x, *, axes, perm):
    return _common.lower_collective(ctx, x, target="jaccl_ppermute", axes=axes, aliases={0: 0},
                                    arrays={"perm": [i for pair in perm for i in pair]})


def _transpose(ct, x, *, axes, perm):
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)]
    inverse = tuple((dest, source) for source, dest in perm)
    return [ppermute_p.bind(ct, axes=axes, perm=inverse)]


def _batcher(axis_data, vals_in, dims_in, *, axes, perm):
    _common.refuse_vmap_axis(axis_data, axes, "ppermute")
    (x,), (d,) = vals_in, dims_in
    return ppermute_p.bind(x, axes=axes, perm=perm), d


def _impl(x, **params):
    raise ValueError("jaccl.ppermute must be called inside jax.shard_map")


ppermute_p = Primitive("jaccl_ppermute")
ppermute_p.def_impl(_impl)
ppermute_p.def_effectful_abstract_eval(_abstract_eval)
for _platform in platforms_for("jaccl_ppermute"):
    mlir.register_lowering(ppermute_p, _lowering, platform=_platform, cacheable=False)
ad.deflinear2(ppermute_p, _transpose)
batching.fancy_primitive_batchers[ppermute_p] = _batcher
