"""jaccl.all_to_all: jax.lax.all_to_all over mesh axes, computed by the jaccl engine.
The primitive always works tiled (split_axis shrinks by the group size, concat_axis grows);
the untiled form is reshaped around it, as jax.lax does. Rules, then registration.
"""

from __future__ import annotations

import math

import jax
from jax import lax
from jax.interpreters import ad, batching, mlir

from .. import _compat, _ordering
from .._compat import Primitive
from .._ext import PLATFORMS
from . import _common


def all_to_all(x, axis_name, split_axis: int, concat_axis: int, *, tiled: bool = False,
               axis_index_groups=None):
    """Splits `x` along `split_axis` into one block per group member, sends block i to member
    i, and concatenates what arrives along `concat_axis` in member order (jax.lax.all_to_all
    semantics, including tiled=False, where split_axis must equal the group size, is removed,
    and a new axis of that size appears at concat_axis). axis_index_groups: as jax.lax's
    (each group exchanges among itself).
    """
    axes = _common.normalize_axes(axis_name)

    def bind(leaf, split_axis=split_axis, concat_axis=concat_axis):
        leaf = leaf if isinstance(leaf, _compat.Tracer) else jax.numpy.asarray(leaf)
        _common.check_dtype(leaf.dtype, "all_to_all")
        if _common.vmap_axes(axes):
            return _common.over_vmap_axes(axes, axis_index_groups, "all_to_all", lambda a: (
                _compat.lax_parallel.all_to_all(leaf, a, split_axis, concat_axis, tiled=tiled)))
        size = _common.check_axes(axes, "all_to_all")
        groups = _common.index_groups(axis_index_groups, size, "all_to_all")
        size = len(groups[0]) if groups else size
        if leaf.ndim == 0:
            raise ValueError("jaccl.all_to_all: x must have at least one dimension")
        split_axis = _common.canonical_axis(split_axis, leaf.ndim, "split_axis", "all_to_all")
        concat_axis = _common.canonical_axis(concat_axis, leaf.ndim, "concat_axis", "all_to_all")
        n = leaf.shape[split_axis]
        if tiled and n % size:
            raise ValueError(
                f"jaccl.all_to_all: split_axis {split_axis} has size {n}, which the group size "
                f"{size} of axis {axis_name!r} does not divide")
        if not tiled:
            if n != size:
                raise ValueError(
                    f"jaccl.all_to_all: with tiled=False split_axis {split_axis} must equal the "
                    f"group size {size} of axis {axis_name!r}, got {n}")
            if split_axis < concat_axis:
                concat_axis += 1
                leaf = lax.expand_dims(leaf, (concat_axis,))
            elif concat_axis < split_axis:
                leaf = lax.expand_dims(leaf, (concat_axis,))
                split_axis += 1
        pieces = size if split_axis == leaf.ndim - 1 else 1  # how the op cuts the last axis
        out = _common.move(lambda v: all_to_all_p.bind(
            _compat.make_varying(v, axes), axes=axes, split_axis=split_axis,
            concat_axis=concat_axis, axis_size=size, groups=groups), leaf, pieces)
        if not tiled and split_axis != concat_axis:
            out = lax.squeeze(out, (split_axis,))
        return out

    return jax.tree_util.tree_map(bind, x)


def _abstract_eval(x, *, axes, split_axis, concat_axis, axis_size, groups=None):
    shape = list(x.shape)
    shape[split_axis] //= axis_size
    shape[concat_axis] *= axis_size
    return (_compat.with_varying(x, _compat.varying_axes(x), shape=tuple(shape), weak_type=False),
            _common.collective_effects(axes))


def _lowering(ctx, x, *, axes, split_axis, concat_axis, axis_size, groups=None):
    if axis_size == 1:
        # jax.lax's all_to_all lowers a group of one to its operand, no op at all, so that XLA
        # fuses across it (with excess precision, float16 and bfloat16 values computed on
        # either side then meet unrounded): so does jaccl's.
        _ordering.token_out(ctx, _ordering.token_in(ctx))
        return [x]
    (aval_in,), (aval_out,) = ctx.avals_in, ctx.avals_out
    return _common.lower_collective(ctx, x, target="jaccl_all_to_all", axes=axes, groups=groups,
                                    outer_in=math.prod(aval_in.shape[:split_axis]),
                                    outer_out=math.prod(aval_out.shape[:concat_axis]))


def _transpose(ct, x, *, axes, split_axis, concat_axis, axis_size, groups=None):
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)]
    return [all_to_all_p.bind(ct, axes=axes, split_axis=concat_axis, concat_axis=split_axis,
                              axis_size=axis_size, groups=groups)]


def _batcher(axis_data, vals_in, dims_in, *, axes, split_axis, concat_axis, axis_size,
             groups=None):
    _common.refuse_vmap_axis(axis_data, axes, "all_to_all")
    (x,), (d,) = vals_in, dims_in
    if d is not None:
        split_axis += d <= split_axis
        concat_axis += d <= concat_axis
    return all_to_all_p.bind(x, axes=axes, split_axis=split_axis, concat_axis=concat_axis,
                             axis_size=axis_size, groups=groups), d


def _impl(x, **params):
    raise ValueError("jaccl.all_to_all must be called inside jax.shard_map")


all_to_all_p = Primitive("jaccl_all_to_all")
all_to_all_p.def_impl(_impl)
all_to_all_p.def_effectful_abstract_eval(_abstract_eval)
for _platform in PLATFORMS:
    mlir.register_lowering(all_to_all_p, _lowering, platform=_platform, cacheable=False)
ad.deflinear2(all_to_all_p, _transpose)
batching.fancy_primitive_batchers[all_to_all_p] = _batcher
