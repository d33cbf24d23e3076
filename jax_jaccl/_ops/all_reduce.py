"""jaccl.all_reduce: jax.lax.psum / pmax / pmin (and a product) over mesh axes, computed by
the jaccl engine. Rules in a row, then the registration block (as jax/_src/lax/parallel.py).
"""

from __future__ import annotations


import jax
import numpy as np
from jax.interpreters import ad, batching, mlir

from .. import _compat, _ordering
from .._compat import Primitive
from .._ext import PLATFORMS
from .._codes import ALGORITHMS, ALL_REDUCE_ALGORITHMS, REDUCE_OPS
from . import _common


def all_reduce(x, axis_name, *, op: str = "sum", algorithm: str = "auto", axis_index_groups=None):
    """Reduces `x` over the mesh axis (or tuple of axes) `axis_name`; every member of a group
    gets the same result, bitwise. Semantics of jax.lax.psum (op='sum'), pmax ('max'), pmin
    ('min'); op='prod' multiplies. bfloat16 sums accumulate in float32 and round once, float16
    ones round after every addition (XLA:CPU's both); on CPUs a bfloat16 reduction runs in
    float32, as XLA:CPU runs jax.lax's (docs/semantics.md); complex numbers are summed part by
    part.
    Over an axis that jax.vmap bound (axis_name=...), the reduction over the batch is
    jax.lax's, and the rest of `axis_name` is reduced by jaccl.

    algorithm: 'auto' (in one process: direct; naive up to 32 KiB; for integer types,
    hierarchical when the group spans hosts with several ranks on each; cascade when the group is
    processes of one host each holding the same number (> 1) of consecutive ranks, e.g. 2
    processes x 2 devices; mesh scatter-gather otherwise), 'naive', 'mesh', 'ring'
    (bidirectional), 'ring_oneway', 'hierarchical' or 'cascade' (these two asked for where the
    groups lack their layout: a ValueError as the program is traced). The result is written over
    the input buffer when XLA can donate it (input_output_aliases), so large reductions do not
    page-fault a new buffer.

    axis_index_groups: as jax.lax's, groups of indices along `axis_name` that reduce among
    themselves (covering every index once; they may differ in size, and a constant is then
    multiplied by the first group's size, as jax.lax.psum does).
    """
    axes = _common.normalize_axes(axis_name)
    _common.check_choice(op, REDUCE_OPS, "op", "all_reduce")
    _common.check_choice(algorithm, ALL_REDUCE_ALGORITHMS, "algorithm", "all_reduce")

    def bind(leaf):
        _common.check_dtype(leaf.dtype if hasattr(leaf, "dtype") else jax.numpy.asarray(leaf).dtype,
                            "all_reduce", op)
        if _compat.reduced_or_unreduced(leaf, axes):
            return _LAX_REDUCTIONS[op](leaf, axes, axis_index_groups=axis_index_groups)
        batch = _common.vmap_axes(axes)
        mesh_axes = tuple(a for a in axes if a not in batch)
        if batch:
            if axis_index_groups is not None:
                raise NotImplementedError("jaccl.all_reduce: axis_index_groups over a jax.vmap "
                                          "axis is not supported (nor by jax.lax)")
            leaf = _reduce_batch(leaf, batch, op)
            if not mesh_axes:
                return leaf
        size = _common.check_axes(mesh_axes, "all_reduce")
        groups = _common.index_groups(axis_index_groups, size, "all_reduce", uneven=True)
        if not isinstance(leaf, _compat.Tracer):
            return _constant(jax.numpy.asarray(leaf), op, len(groups[0]) if groups else size)
        leaf, restore = _common.to_engine(leaf, reduces=True)
        leaf = _compat.make_varying(leaf, mesh_axes)
        return restore(all_reduce_p.bind(leaf, axes=mesh_axes, op=op, algorithm=algorithm,
                                         groups=groups))

    return jax.tree_util.tree_map(bind, x)


def _lax_product(x, axes, axis_index_groups=None):
    if axis_index_groups is not None:
        raise NotImplementedError("jaccl.all_reduce: op='prod' of an unreduced value")
    return jax.numpy.prod(_compat.lax_parallel.all_gather(x, axes), axis=0).astype(x.dtype)


_LAX_REDUCTIONS = {"sum": _compat.lax_parallel.psum, "max": _compat.lax_parallel.pmax,
                   "min": _compat.lax_parallel.pmin, "prod": _lax_product}


def _reduce_batch(x, batch: tuple, op: str):
    """The reduction over jax.vmap axes: a computation on the batch, as jax.lax does it."""
    if op == "sum":
        return _compat.lax_parallel.psum(x, batch)
    if op == "max":
        return _compat.lax_parallel.pmax(x, batch)
    if op == "min":
        return _compat.lax_parallel.pmin(x, batch)
    for axis in batch:  # jax.lax has no product: gather the batch and multiply
        x = jax.numpy.prod(_compat.lax_parallel.all_gather(x, axis), axis=0).astype(x.dtype)
    return x


def _constant(x, op, size):
    if op == "sum":
        return x * size
    if op == "prod":
        return x ** size
    return x


def _abstract_eval(x, *, axes, op, algorithm, groups):
    varying = _compat.varying_axes(x)
    if _compat.check_vma_enabled() and groups is None:  # subgroups' results still differ
        varying = varying - set(axes)
    return _compat.with_varying(x, varying), _common.collective_effects(axes)


def _lowering(ctx, x, *, axes, op, algorithm, groups):
    if _common.one_device_program(ctx):
        # XLA:CPU's all-reduce in a program of one device copies its operand; in a group of one
        # among several devices it folds from the op's identity, as jaccl's engine does (a -0
        # sum is +0 there, a max of NaN -inf: xla_ffi/common/reduce_apply.h).
        _ordering.token_out(ctx, _ordering.token_in(ctx))
        return [x]
    _common.refuse_unfit_algorithm("all_reduce", algorithm, ctx, axes, groups)
    return _common.lower_collective(ctx, x, target="jaccl_all_reduce", axes=axes, groups=groups,
                                    aliases={0: 0}, op=REDUCE_OPS[op],
                                    algorithm=ALGORITHMS[algorithm])


def _jvp(primals, tangents, **params):
    if params["op"] != "sum":
        raise NotImplementedError(
            f"jaccl.all_reduce: differentiation is defined for op='sum' only, not "
            f"{params['op']!r} (as for jax.lax.pmax/pmin)")
    (x,), (t,) = primals, tangents
    y = all_reduce_p.bind(x, **params)
    if type(t) is ad.Zero:
        return y, ad.Zero(jax.typeof(y).to_tangent_aval())
    return y, all_reduce_p.bind(t, **params)


def _transpose(ct, x, **params):
    # The sum over a group is linear. Under check_vma its output is invariant over `axes`, so
    # the cotangent only needs to become varying again (pvary, as for jax.lax.psum); without
    # check_vma (or over subgroups, whose results vary) every member holds a partial cotangent
    # and the transpose is the sum itself.
    if type(ct) is ad.Zero:
        return [ad.Zero(x.aval)]
    if _compat.check_vma_enabled() and params["groups"] is None:
        return [_compat.pvary(ct, params["axes"])]
    return [all_reduce_p.bind(ct, **params)]


def _batcher(axis_data, vals_in, dims_in, **params):
    _common.refuse_vmap_axis(axis_data, params["axes"], "all_reduce")
    (x,), (d,) = vals_in, dims_in
    return all_reduce_p.bind(x, **params), d


def _impl(x, **params):
    raise ValueError("jaccl.all_reduce must be called inside jax.shard_map")


all_reduce_p = Primitive("jaccl_all_reduce")
all_reduce_p.def_impl(_impl)
all_reduce_p.def_effectful_abstract_eval(_abstract_eval)
for _platform in PLATFORMS:
    mlir.register_lowering(all_reduce_p, _common.widened_as_xla_cpu_reduces(_lowering)
                           if _platform == "cpu" else _lowering, platform=_platform, cacheable=False)
ad.primitive_jvps[all_reduce_p] = _jvp
ad.primitive_transposes[all_reduce_p] = _transpose
batching.fancy_primitive_batchers[all_reduce_p] = _batcher


# JAX's own psum in a shard_map body that binds jaccl collectives, on the CPU. Where a value
# that does not vary over an axis meets one that does, JAX inserts pvary, and pvary's transpose
# is JAX's psum (psum_invariant): the backward pass of a program written with jaccl would
# otherwise put XLA's collective beside jaccl's calls (gloo, with several devices a process:
# two engines that order their calls apart). Inside such a body that psum, and any jax.lax.psum
# written there, lowers to jaccl's all_reduce (the same bits as XLA's); elsewhere, and for the
# types jaccl does not sum as they are (bool, complex), it is JAX's.
def _jax_psum_lowering(fallback):
    def rule(ctx, x, *, axes):
        dtype = np.dtype(ctx.avals_in[0].dtype)
        if (not _compat.lowering_a_jaccl_shard_map() or any(isinstance(a, int) for a in axes)
                or dtype not in _common.SUPPORTED_DTYPES or dtype == np.bool_
                or np.issubdtype(dtype, np.complexfloating)):
            return fallback(ctx, x, axes=axes)
        return _common.widened_as_xla_cpu_reduces(_lowering)(
            ctx, x, axes=tuple(axes), op="sum", algorithm="auto", groups=None)
    return rule


_psum_invariant_p = _compat.psum_invariant_primitive()
if _psum_invariant_p is not None:
    mlir.register_lowering(_psum_invariant_p,
                           _jax_psum_lowering(_compat.jax_lowering(_psum_invariant_p)),
                           platform="cpu", cacheable=False)
