"""jax.lax's collectives, with jax.lax's names, signatures and semantics, carried by jaccl.

    from jax_jaccl import lax       # instead of `from jax import lax`, inside shard_map

moves a shard_map (or jax.pmap) program's collectives onto jaccl's engine. Each function takes
exactly the arguments jax.lax's takes (in jax 0.10), accepts what jax.lax accepts inside
jax.shard_map and jax.pmap and refuses what it refuses there (jax.lax.psum and pmean refuse
axis_index_groups of a traced value inside a shard_map with check_vma=True, and take them,
uneven ones too, under jax.pmap), and computes what jax.lax computes: psum of bool sums int32
values, pmean of integers is a float mean, complex numbers are summed, gathered and moved.
Over axes that jax.vmap bound (axis_name=...) the result is jax.lax's computation on the
batch. Functions that move no data (axis_index, axis_size, and pcast or pvary where the installed
jax has them) are jax.lax's own. Where jax.lax has psum_scatter_start (jax 0.12), so does this.

Contract: every function here is a thin adapter over jax_jaccl._ops; none keeps state.
"""

from __future__ import annotations

import jax
import numpy as np
from jax import lax as _lax

from . import _compat

from ._ops.all_gather import all_gather as _all_gather
from ._ops.all_reduce import all_reduce as _all_reduce
from ._ops.all_to_all import all_to_all as _all_to_all
from ._ops.ppermute import ppermute as _ppermute
from ._ops.ragged_all_to_all import ragged_all_to_all as _ragged_all_to_all
from ._ops.reduce_scatter import reduce_scatter as _reduce_scatter

axis_index = _lax.axis_index
axis_size = _lax.axis_size

__all__ = ["all_gather", "all_to_all", "axis_index", "axis_size", "pbroadcast", "pmax", "pmean",
           "pmin", "ppermute", "pshuffle", "psum", "psum_scatter", "pswapaxes",
           "ragged_all_to_all"]

# Names that move no data, where the installed jax.lax has them: its own.
for _name in ("pcast", "pvary"):
    if hasattr(_lax, _name):
        globals()[_name] = getattr(_lax, _name)
        __all__.append(_name)


def _axes(axis_name) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _refuse_groups_of_sums(axis_index_groups, name):
    # jax.lax.psum (and pmean through it) raises NotImplementedError for axis_index_groups of
    # a traced value where shard_map checks what varies (check_vma=True, its default); under
    # jax.pmap and with check_vma=False it takes them, uneven groups included.
    if axis_index_groups is not None and _compat.check_vma_enabled():
        raise NotImplementedError(f"jax_jaccl.lax.{name}: axis_index_groups is not supported "
                                  f"inside shard_map with check_vma=True (as jax.lax.{name}); "
                                  "use jax_jaccl.all_reduce(..., axis_index_groups=...)")


def _refuse_mixed_states(x, axes, name) -> None:
    # jax.lax.psum and psum_scatter (and pmax and pmin from jax 0.11.2) raise ValueError for an
    # input varying over some of the axes and invariant (or reduced) over others, check_vma's
    # types, where this jax does (it pvaries an input invariant over all of them).
    check = _compat.lax_state_check(name)
    if check is not None:
        for leaf in jax.tree_util.tree_leaves(x):
            if isinstance(leaf, _compat.Tracer):
                check(jax.typeof(leaf), axes)


def psum(x, axis_name, *, axis_index_groups=None):
    """jax.lax.psum: the sum over `axis_name` (bool inputs are summed as int32)."""
    axes = _axes(axis_name)
    if not axes:
        return x

    def one(leaf):
        if not isinstance(leaf, _compat.Tracer):  # a constant stays one: jax.lax's, no data moves
            return _compat.lax_parallel.psum(leaf, axes, axis_index_groups=axis_index_groups)
        _refuse_mixed_states(leaf, axes, "psum")
        _refuse_groups_of_sums(axis_index_groups, "psum")
        if np.dtype(leaf.dtype) == np.bool_:
            leaf = _lax.convert_element_type(leaf, np.int32)
        return _all_reduce(leaf, axes, op="sum", axis_index_groups=axis_index_groups)

    return jax.tree_util.tree_map(one, x)


def pmean(x, axis_name, *, axis_index_groups=None):
    """jax.lax.pmean: psum divided by the group's size (integers give a float mean; with
    uneven axis_index_groups jax.lax divides by the first group's size, and so does this)."""
    axes = _axes(axis_name)
    if not axes:
        return x
    n = _compat.lax_parallel.psum(1, axes, axis_index_groups=axis_index_groups)
    return jax.tree_util.tree_map(lambda v: v / n,
                                  psum(x, axes, axis_index_groups=axis_index_groups))


def pmax(x, axis_name, *, axis_index_groups=None):
    """jax.lax.pmax."""
    axes = _axes(axis_name)
    _refuse_mixed_states(x, axes, "pmax")
    return x if not axes else _all_reduce(x, axes, op="max", axis_index_groups=axis_index_groups)


def pmin(x, axis_name, *, axis_index_groups=None):
    """jax.lax.pmin."""
    axes = _axes(axis_name)
    _refuse_mixed_states(x, axes, "pmin")
    return x if not axes else _all_reduce(x, axes, op="min", axis_index_groups=axis_index_groups)


def psum_scatter(x, axis_name, *, scatter_dimension=0, axis_index_groups=None, tiled=False):
    """jax.lax.psum_scatter."""
    _refuse_mixed_states(x, _axes(axis_name), "psum_scatter")
    return _reduce_scatter(x, _axes(axis_name), scatter_dimension=scatter_dimension, tiled=tiled,
                           axis_index_groups=axis_index_groups)


class Started:
    """A collective started by a *_start function: done() gives its result. jaccl's CPU calls
    of at least JACCL_ASYNC_MIN_KB (1024 KiB by default) already run beside XLA's compute until
    their result is used (smaller ones of lane 0 run at once on XLA's thread), so the call is
    made at start; the value is a pytree (it passes through jit and tree functions)."""

    def __init__(self, result):
        self._result = result

    def done(self):
        return self._result


jax.tree_util.register_pytree_node(Started, lambda s: ((s._result,), None),
                                   lambda _, children: Started(children[0]))


def psum_scatter_start(x, axis_name, *, scatter_dimension=0, axis_index_groups=None,
                       tiled=False):
    """jax.lax.psum_scatter_start (jax 0.12): psum_scatter, started; `.done()` of each leaf
    gives its result."""
    return jax.tree_util.tree_map(
        lambda leaf: Started(psum_scatter(leaf, axis_name, scatter_dimension=scatter_dimension,
                                          axis_index_groups=axis_index_groups, tiled=tiled)), x)


if hasattr(_lax, "psum_scatter_start"):
    __all__.append("psum_scatter_start")
else:  # this jax has no such name: neither has its stand-in
    del psum_scatter_start


def all_gather(x, axis_name, *, axis_index_groups=None, axis=0, tiled=False, to="varying"):
    """jax.lax.all_gather; `to` other than 'varying' (an invariant or reduced result type) is
    jax.lax's own all_gather."""
    if to != "varying":
        return _compat.lax_parallel.all_gather(x, axis_name, axis_index_groups=axis_index_groups,
                                               axis=axis, tiled=tiled, to=to)
    return _all_gather(x, _axes(axis_name), axis=axis, tiled=tiled,
                       axis_index_groups=axis_index_groups)


def all_to_all(x, axis_name, split_axis, concat_axis, *, axis_index_groups=None, tiled=False):
    """jax.lax.all_to_all."""
    return _all_to_all(x, _axes(axis_name), split_axis, concat_axis, tiled=tiled,
                       axis_index_groups=axis_index_groups)


def ppermute(x, axis_name, perm):
    """jax.lax.ppermute: (source, destination) index pairs; members that receive nothing get
    zeros. Where the installed jax.lax.ppermute takes only a list or a tuple of pairs, so does
    this."""
    if not isinstance(perm, (list, tuple)) and _compat.ppermute_takes_only_sequences():
        raise TypeError("`perm` passed to `jax.lax.ppermute` must be a list or a tuple. Got "
                        f"perm of type {type(perm)}")  # jax.lax's own words
    return _ppermute(x, _axes(axis_name), perm)


def pshuffle(x, axis_name, perm):
    """jax.lax.pshuffle: perm[i] is the index member i takes its value from."""
    if set(perm) != set(range(len(perm))):
        raise ValueError(f"`perm` does not represent a permutation: {perm}")
    return ppermute(x, axis_name, list(zip(perm, range(len(perm)))))


def pswapaxes(x, axis_name, axis, *, axis_index_groups=None):
    """jax.lax.pswapaxes: swaps the positional axis `axis` with the mesh axis."""
    return all_to_all(x, axis_name, axis, axis, axis_index_groups=axis_index_groups)


def pbroadcast(x, axis_name, source):
    """jax.lax.pbroadcast: every member gets member `source`'s x."""
    axes = _axes(axis_name)
    size = _compat.lax_parallel.psum(1, axes)
    if not 0 <= int(source) < size:
        raise ValueError(f"pbroadcast source {source} is out of range for an axis of size {size}")
    return jax.tree_util.tree_map(
        lambda v: jax.numpy.take(_all_gather(v, axes), int(source), axis=0), x)


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *,
                      axis_name, axis_index_groups=None):
    """jax.lax.ragged_all_to_all (see jax_jaccl.ragged_all_to_all)."""
    return _ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets,
                              recv_sizes, axis_name=_axes(axis_name),
                              axis_index_groups=axis_index_groups)
