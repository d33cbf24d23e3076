"""jaccl.ppermute: jax.lax.ppermute (collective permute) over mesh axes, computed by the jaccl
engine: frames travel only between the pairs of the permutation. Rules in a row, then the
registration block.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.interpreters import ad, batching, mlir

from .. import _compat
from .._compat import Primitive
from .._ext import platforms_for
from . import _common


def ppermute(x, axis_name, perm):
    """Sends `x` from member `source` to member `dest` of every group for each pair
    (source, dest) of `perm` (jax.lax.ppermute semantics): indices along `axis_name`, negative
    ones counted from the end; no two pairs share a source or a destination; a member that no
    pair sends to gets zeros. Over a tuple of axes the members are numbered as the installed
    jax.lax.ppermute numbers them (_numbered_axes). The result takes the input's buffer when XLA
    can donate it (input_output_aliases).
    """
    axes = _common.normalize_axes(axis_name)
    perm = tuple((int(source), int(dest)) for source, dest in perm)

    def bind(leaf):
        leaf = leaf if isinstance(leaf, _compat.Tracer) else jax.numpy.asarray(leaf)
        _common.check_dtype(leaf.dtype, "ppermute")
        if _common.vmap_axes(axes):
            return _common.over_vmap_axes(axes, None, "ppermute",
                                          lambda a: _permute_batch(leaf, a, perm))
        pairs = _member_pairs(perm, _common.check_axes(axes, "ppermute"), axis_name)
        return _common.move(lambda v: ppermute_p.bind(_compat.make_varying(v, axes), axes=axes,
                                                       perm=pairs), leaf)

    return jax.tree_util.tree_map(bind, x)


class PairOutOfRangeError(ValueError, IndexError):
    """A pair of perm names an index outside the axis: jax.lax raises IndexError there (at
    lowering); jaccl raised ValueError at trace time. Both catch it."""


def _member_pairs(perm, size, axis_name) -> tuple:
    """`perm` with every index in [0, size): jax.lax takes an index in [-size, size), negative
    ones from the end as Python indexes, and refuses a source or a destination given twice."""
    for source, dest in perm:
        if not (-size <= source < size and -size <= dest < size):
            raise PairOutOfRangeError(f"jaccl.ppermute: pair ({source}, {dest}) of perm is out "
                                      f"of range for axis {axis_name!r} of size {size}")
    pairs = tuple((source % size, dest % size) for source, dest in perm)
    sources, dests = [p[0] for p in pairs], [p[1] for p in pairs]
    if len(set(sources)) != len(sources) or len(set(dests)) != len(dests):
        raise ValueError(f"ppermute sources and destinations must be unique, got {perm}.")
    return pairs


def _permute_batch(x, axis, perm):
    """ppermute over a jax.vmap axis: each batch member takes its source's value (zeros
    without one), a computation on the batch. A full permutation is jax.lax.ppermute's."""
    size = jax.lax.axis_size(axis)
    pairs = _member_pairs(perm, size, axis)
    if len(pairs) == size:
        return _compat.lax_parallel.ppermute(x, axis, pairs)
    source = np.full((size,), -1, np.int32)
    for s, d in pairs:
        source[d] = s
    mine = jax.numpy.asarray(source)[jax.lax.axis_index(axis)]
    everyone = _compat.lax_parallel.all_gather(x, axis)
    return jax.numpy.where(mine >= 0, everyone[jax.numpy.maximum(mine, 0)],
                           jax.numpy.zeros_like(x))


def _numbered_axes(ctx, axes: tuple) -> tuple:
    """The order of `axes` in which the installed jax.lax.ppermute numbers a group's members:
    member i is the i-th device of the group with that order's first axis slowest. jax up to
    0.11.1 sorts each group (the mesh's order, whatever the tuple's); later jax refuses a tuple
    that sorting would reorder unless its jax_raise_on_ppermute_sort_diff is off, and then
    numbers in the tuple's order, as jax.lax.axis_index does. jaccl does the same."""
    mesh_order = _common.in_mesh_order(ctx, axes)
    if np.array_equal(_common.group_table(ctx, axes)[0], _common.group_table(ctx, mesh_order)[0]):
        return axes
    refuses = _compat.ppermute_refuses_axes_out_of_mesh_order()
    if refuses is None:
        return mesh_order
    if refuses:
        raise RuntimeError(
            "Make sure that the axis_name passed to jax.lax.ppermute is in the same order as the "
            f"axis_names declared on the mesh (jaccl.ppermute over {axes!r}: the mesh orders "
            f"them {mesh_order!r}). To number the members in the order of axis_name, as "
            "jax.lax.axis_index does, turn jax's check off as for jax.lax.ppermute: "
            "jax.config.update('jax_raise_on_ppermute_sort_diff', False).")
    return axes


def _abstract_eval(x, *, axes, perm):
    return _compat.with_varying(x, _compat.varying_axes(x)), _common.collective_effects(axes)


def _lowering(ctx, x, *, axes, perm):
    return _common.lower_collective(ctx, x, target="jaccl_ppermute",
                                    axes=_numbered_axes(ctx, axes), aliases={0: 0},
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
