"""jaccl.ragged_all_to_all: jax.lax.ragged_all_to_all over mesh axes, computed by the jaccl
engine (XLA:CPU has no ragged-all-to-all of its own): only the rows that exist travel, and
offsets or sizes that would read or write out of bounds are an error on every rank of the
group. Rules in a row, then the registration block.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad, batching, mlir

from .. import _compat
from .._compat import Primitive
from .._ext import platforms_for
from . import _common
from .all_to_all import all_to_all_p

_INDEX_NAMES = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")


def ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *,
                      axis_name, axis_index_groups=None):
    """jax.lax.ragged_all_to_all's semantics: with K entries in each index array (a multiple
    of the group size, K / size slices for every member), this member sends rows
    operand[input_offsets[i] : + send_sizes[i]] to member i // (K / size), which writes them at
    its rows output_offsets[i] : + send_sizes[i]; recv_sizes[i] rows arrive from member
    i // (K / size). The result is `output` with the received rows written in.
    axis_index_groups: as jax.lax's (each group exchanges among itself; `size` is then a
    group's).
    """
    # jax.lax's checks first, in its order (its abstract evaluation's: index types, ranks)
    indices = [v if isinstance(v, _compat.Tracer) else jnp.asarray(v)
               for v in (input_offsets, send_sizes, output_offsets, recv_sizes)]
    for v, name in zip(indices, _INDEX_NAMES):
        if not jnp.issubdtype(v.dtype, jnp.integer):
            raise ValueError(f"ragged_all_to_all {name} must be integer type.")
    for v, name in zip(indices, _INDEX_NAMES):
        if v.ndim != 1 or v.shape[0] < 1:
            raise ValueError(f"ragged_all_to_all {name} must be rank 1 with positive dimension "
                             f"size, but got shape {v.shape}")
    indices = [v if v.dtype in (np.dtype("int32"), np.dtype("int64")) else v.astype(jnp.int32)
               for v in indices]
    axes = _common.normalize_axes(axis_name)
    operand = operand if isinstance(operand, _compat.Tracer) else jnp.asarray(operand)
    output = output if isinstance(output, _compat.Tracer) else jnp.asarray(output)
    _common.check_dtype(operand.dtype, "ragged_all_to_all")
    if _common.vmap_axes(axes):
        raise NotImplementedError("Please open a feature request!")  # jax.lax's words
    size = _common.check_axes(axes, "ragged_all_to_all")
    groups = _common.index_groups(axis_index_groups, size, "ragged_all_to_all")
    size = len(groups[0]) if groups else size
    if operand.ndim < 1 or output.ndim < 1:
        raise ValueError("jaccl.ragged_all_to_all: operand and output need a leading (row) "
                         "dimension")
    if operand.dtype != output.dtype or operand.shape[1:] != output.shape[1:]:
        raise ValueError(
            "jaccl.ragged_all_to_all: operand and output must have the same dtype and the same "
            f"shape but for the leading dimension, got {operand.dtype}{list(operand.shape)} and "
            f"{output.dtype}{list(output.shape)}")
    lengths = {v.shape[0] for v in indices}
    if len(lengths) != 1 or lengths.pop() % size:
        raise ValueError(
            "jaccl.ragged_all_to_all: input_offsets, send_sizes, output_offsets and recv_sizes "
            f"must have the same length, a multiple of the group size {size} of axis "
            f"{axis_name!r}; got lengths {[v.shape[0] for v in indices]}")
    # rows are cut along the first axis: the last may be packed where it is not the first;
    # narrow floats travel widened, which keeps their derivative (_common.move)
    pieces = 1 if operand.ndim >= 2 else None
    widen = jnp.issubdtype(operand.dtype, jnp.inexact)
    (operand, restore), (output, _) = (
        _common.to_engine(v, reduces=widen, last_axis_pieces=pieces) for v in (operand, output))
    operand, output = (_compat.make_varying(v, axes) for v in (operand, output))
    indices = [_compat.make_varying(v, axes) for v in indices]
    return restore(ragged_all_to_all_p.bind(operand, output, *indices, axes=axes, axis_size=size,
                                            groups=groups))


def _abstract_eval(operand, output, *indices, axes, axis_size, groups):
    varying = _compat.varying_axes(operand) | _compat.varying_axes(output)
    return (_compat.with_varying(output, varying, weak_type=False),
            _common.collective_effects(axes))


def _lowering(ctx, operand, output, *indices, axes, axis_size, groups):
    # `output` as jnp.zeros makes it (the program's own code: zeros, then rows written in):
    # the zeros variant leaves it out, and the engine zeroes only the rows nothing arrives at
    # in a fresh buffer, instead of XLA filling (and page-faulting) a buffer with zeros first.
    if _compat.is_positive_zeros(output) and "cpu" in ctx.module_context.platforms:
        return _common.lower_collective(ctx, operand, *indices, axes=axes, groups=groups,
                                        target="jaccl_ragged_all_to_all_into_zeros",
                                        avals_in=[ctx.avals_in[0], *ctx.avals_in[2:]])
    return _common.lower_collective(ctx, operand, output, *indices,
                                    target="jaccl_ragged_all_to_all", axes=axes, groups=groups,
                                    aliases={1: 0})


def _jvp(primals, tangents, **params):
    operand, output, *indices = primals
    d_operand, d_output, *_ = tangents
    result = ragged_all_to_all_p.bind(operand, output, *indices, **params)
    if type(d_operand) is ad.Zero and type(d_output) is ad.Zero:
        return result, ad.Zero(jax.typeof(result).to_tangent_aval())
    d_operand = ad.instantiate_zeros(d_operand)
    d_output = ad.instantiate_zeros(d_output)
    return result, ragged_all_to_all_p.bind(d_operand, d_output, *indices, **params)


def _received_rows(rows, offsets, sizes):
    """[rows] bool: which rows of a result the slices (offsets, sizes) wrote."""
    starts = jnp.zeros((rows + 1,), jnp.int32).at[offsets].add(1)
    ends = jnp.zeros((rows + 1,), jnp.int32).at[offsets + sizes].add(1)
    return jnp.cumsum(starts - ends)[:rows] > 0


def _transpose(ct, operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *,
               axes, axis_size, groups):
    # The result's rows that came from member q slice j go back there: a ragged_all_to_all
    # with the roles swapped (each member learns where its received rows sit from the senders'
    # output_offsets, and where they came from from their input_offsets). The rest of the
    # cotangent is the output's (rows nothing was written to).
    if type(ct) is ad.Zero:
        return [ad.Zero(operand.aval) if ad.is_undefined_primal(operand) else None,
                ad.Zero(output.aval) if ad.is_undefined_primal(output) else None] + [None] * 4
    swap = dict(axes=axes, split_axis=0, concat_axis=0, axis_size=axis_size, groups=groups)
    here = all_to_all_p.bind(output_offsets, **swap)  # where this member's received rows are
    there = all_to_all_p.bind(input_offsets, **swap)  # where they came from
    zeros = jnp.zeros(operand.aval.shape, operand.aval.dtype)
    operand_ct = ragged_all_to_all_p.bind(ct, zeros, here, recv_sizes, there, send_sizes,
                                          axes=axes, axis_size=axis_size, groups=groups)
    written = _received_rows(ct.shape[0], here, recv_sizes)
    written = lax.broadcast_in_dim(written, ct.shape, (0,))
    output_ct = jnp.where(written, jnp.zeros_like(ct), ct)
    return [operand_ct if ad.is_undefined_primal(operand) else None,
            output_ct if ad.is_undefined_primal(output) else None] + [None] * 4


def _batcher(axis_data, vals_in, dims_in, *, axes, axis_size, groups):
    # A vmap axis that is not one of `axes`: the batch's members are rows of one larger
    # exchange (their offsets shifted by the batch index times the row counts), as jax.lax
    # batches its own ragged_all_to_all (and, as it, not with axis_index_groups).
    _common.refuse_vmap_axis(axis_data, axes, "ragged_all_to_all")
    if all(d is None for d in dims_in):
        return ragged_all_to_all_p.bind(*vals_in, axes=axes, axis_size=axis_size,
                                        groups=groups), None
    if groups is not None:
        raise NotImplementedError("Please open a feature request!")  # jax.lax's words
    b = axis_data.size
    operand, output = (batching.bdim_at_front(v, d, b) for v, d in zip(vals_in[:2], dims_in[:2]))
    n_rows, m_rows = operand.shape[1], output.shape[1]

    def per_batch_at_second(v, d):
        return batching.broadcast(v, b, 1, None) if d is None else jnp.moveaxis(v, d, 1)

    input_offsets, send_sizes, output_offsets, recv_sizes = (
        per_batch_at_second(v, d) for v, d in zip(vals_in[2:], dims_in[2:]))
    shift = jnp.arange(b, dtype=input_offsets.dtype)[None, :]
    input_offsets = input_offsets + shift * n_rows
    output_offsets = output_offsets + (shift * m_rows).astype(output_offsets.dtype)

    def merge(v):
        return v.reshape((-1,) + v.shape[2:])

    out = ragged_all_to_all_p.bind(merge(operand), merge(output), merge(input_offsets),
                                   merge(send_sizes), merge(output_offsets), merge(recv_sizes),
                                   axes=axes, axis_size=axis_size, groups=groups)
    return out.reshape((b, m_rows) + out.shape[1:]), 0


def _impl(*args, **params):
    raise ValueError("jaccl.ragged_all_to_all must be called inside jax.shard_map")


ragged_all_to_all_p = Primitive("jaccl_ragged_all_to_all")
ragged_all_to_all_p.def_impl(_impl)
ragged_all_to_all_p.def_effectful_abstract_eval(_abstract_eval)
for _platform in platforms_for("jaccl_ragged_all_to_all"):
    mlir.register_lowering(ragged_all_to_all_p, _lowering, platform=_platform, cacheable=False)
ad.primitive_jvps[ragged_all_to_all_p] = _jvp
ad.primitive_transposes[ragged_all_to_all_p] = _transpose
batching.fancy_primitive_batchers[ragged_all_to_all_p] = _batcher
