"""jaccl.moe_dispatch / jaccl.moe_combine: expert-parallel MoE inside jax.shard_map, with
static shapes (DeepEP's low-latency layout).

Two primitives move the rows (moe/moe.h): moe_dispatch (dispatch direction: rows of a
source array to listed rows of a destination array on the ranks that own their experts) and
moe_combine (the way back, with the weighted sum, or the per-pair dot product the weights'
gradient needs). Routing is jnp arithmetic on all-gathered counts (moe_routing.py).
Gradients (custom_vjp): dispatch's transpose is an unweighted combine; combine's is a
dispatch of the cotangent scaled by each row's router weight, plus, for the weights, the
dot product of the cotangent with each pair's expert output.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import mlir

from .. import _compat
from .._compat import Primitive
from .._ext import PLATFORMS
from . import _common
from . import fp8 as fp8_mod
from .all_gather import all_gather
from .moe_routing import route

DTYPES = (np.dtype("float32"), np.dtype(jnp.bfloat16), np.dtype("float16"))


class MoeHandle(NamedTuple):
    """What dispatch tells combine (and the gradients): arrays only, static shapes."""
    topk_idx: jax.Array      # [T, K] int32
    send_slot: jax.Array     # [T, K] int32: row of each pair in its expert's buffer, -1 if none
    counts: jax.Array        # [R, E] int32: rows each rank routed to each expert, before capacity
    dropped: jax.Array       # [E_loc] int32: rows dropped by this rank's experts (capacity)
    recv_weights: jax.Array  # [E_loc, C] float32: router weight of each received row (0 = padding);
    #                          dropless: [M], the rows of recv_x
    send_pairs: jax.Array    # routing lists (moe_routing.Routing)
    send_tokens: jax.Array
    send_offsets: jax.Array
    recv_rows: jax.Array
    recv_offsets: jax.Array
    lost: jax.Array          # [E] int32: this rank's pairs routed to each expert of a lost rank
    #                          (moe_dispatch's lost_ranks; zero for every other expert)


# ----------------------------------------------------------------------- primitives

def _dispatch_abstract(src, send_rows, send_offsets, recv_rows, recv_offsets, topk_idx, *, axes,
                       num_experts, dst_rows):
    out = _compat.with_varying(src, _compat.collective_varying(src, axes),
                               shape=(dst_rows,) + tuple(src.shape[1:]))
    return out, _common.collective_effects(axes)


def _dispatch_lowering(ctx, *operands, axes, num_experts, dst_rows):
    return _common.lower_collective(ctx, *operands, target="jaccl_moe_dispatch", axes=axes,
                                    num_experts=num_experts)


def _combine_abstract(y, send_rows, send_offsets, recv_pairs, recv_offsets, weights_or_dout, *,
                      axes, topk, pair_dot, tokens):
    if pair_dot:
        shape, dtype = (tokens, topk), np.dtype("float32")
    else:
        shape, dtype = (tokens,) + tuple(y.shape[1:]), y.dtype
    out = _compat.with_varying(y, _compat.collective_varying(y, axes), shape=shape, dtype=dtype)
    return out, _common.collective_effects(axes)


def _combine_lowering(ctx, *operands, axes, topk, pair_dot, tokens):
    return _common.lower_collective(ctx, *operands, target="jaccl_moe_combine", axes=axes,
                                    topk=topk, pair_dot=int(pair_dot))


def _no_eager(*args, **params):
    raise ValueError("jaccl MoE ops must be called inside jax.shard_map")


moe_dispatch_p = Primitive("jaccl_moe_dispatch")
moe_dispatch_p.def_impl(_no_eager)
moe_dispatch_p.def_effectful_abstract_eval(_dispatch_abstract)
for _platform in PLATFORMS:  # on GPUs: staged through the CPU engine (xla_ffi/handlers/cuda/moe.cc)
    mlir.register_lowering(moe_dispatch_p, _dispatch_lowering, platform=_platform, cacheable=False)

moe_combine_p = Primitive("jaccl_moe_combine")
moe_combine_p.def_impl(_no_eager)
moe_combine_p.def_effectful_abstract_eval(_combine_abstract)
for _platform in PLATFORMS:
    mlir.register_lowering(moe_combine_p, _combine_lowering, platform=_platform, cacheable=False)


def _dispatch_rows(src, h: MoeHandle, send_rows, dst_rows, axes, num_experts):
    return moe_dispatch_p.bind(src, send_rows, h.send_offsets, h.recv_rows, h.recv_offsets,
                               h.topk_idx, axes=axes, num_experts=num_experts, dst_rows=dst_rows)


def _return(y_flat, h: MoeHandle, weights_or_dout, axes, pair_dot):
    T, K = h.topk_idx.shape
    return moe_combine_p.bind(y_flat, h.recv_rows, h.recv_offsets, h.send_pairs, h.send_offsets,
                              weights_or_dout, axes=axes, topk=K, pair_dot=pair_dot, tokens=T)


# ----------------------------------------------------------------------- dispatch

def moe_dispatch(x, topk_idx, topk_weights, *, num_experts: int, capacity=None, axis_name,
                 dropless: bool = False, fp8: bool = False, scale_format: str = "float32",
                 lost_ranks=()):
    """Sends every (token, expert) row of `x` [T, H] to the rank that owns the expert.

    topk_idx [T, K] int32 names each token's experts (-1: not routed); topk_weights [T, K]
    float32 are the router weights (combine applies them). Experts are split contiguously:
    expert e lives on rank e // (num_experts / group size). Returns recv_x [E_loc, capacity, H]
    in x's dtype (rows of an expert ordered by (source rank, source token), padding rows zero),
    recv_count [E_loc] int32 (valid rows), and a MoeHandle for moe_combine. Rows past
    `capacity` are dropped, the largest (source rank, source token) first; handle.dropped
    counts them per local expert. Only rows that exist travel.

    dropless=True (no capacity): no row is ever dropped. recv_x is [M, H] with
    M = T * K * (group size), the most rows that can arrive (every pair of every rank): local
    expert j's rows are rows group_start[j] .. group_start[j] + recv_count[j] (group_start the
    running sum of recv_count), in (source rank, source token) order, and the rows past them are
    zero: jax.lax.ragged_dot(recv_x, w, group_sizes=recv_count) takes it as it is, and
    moe_combine takes expert outputs [M, H'] back.

    FP8 (H a multiple of 128): with fp8=True the rows are quantised before they are sent
    (jaccl.quantize_fp8 with `scale_format`), and x may instead be an already quantised
    (values float8_e4m3fn [T, H], scales [T, H / 128]) pair; recv_x is then an Fp8Rows of
    values [E_loc, capacity, H] float8_e4m3fn and their scales [E_loc, capacity, H / 128]
    (dropless: [M, H] and [M, H / 128]; padding rows: zero values, zero scales). Only values
    and scales travel (bfloat16 rows: H + 4 H / 128 bytes instead of 2 H). Gradients: the cast is straight-through (x's
    cotangent is dispatch's transpose of d_values / scale; scales carry none), where JAX gives
    d_values in float8_e4m3fn, unscaled (a dequantising consumer's cotangent times the scale,
    so what falls below 2^-9 is lost); a caller's own FP8 pair has no gradient.

    lost_ranks (serving that goes on without a lost process, and cannot move its experts):
    ranks of the expert layout whose experts are gone. The experts stay split over the
    group's size + len(lost_ranks) ranks of the layout; the group (a mesh of the live
    devices, in the layout's order) holds the others, member i the i-th rank not lost. Pairs
    routed to a lost rank's experts are dropped before anything moves, as if their topk_idx
    were -1 (combine skips them), and counted per expert in handle.lost [num_experts].
    """
    axes = _common.normalize_axes(axis_name)
    ranks = _common.check_axes(axes, "moe_dispatch")
    lost = _check_lost(lost_ranks, ranks)
    pre_quantised = isinstance(x, tuple)
    if pre_quantised:
        fp8_mod.check_fp8_rows(x, "jaccl.moe_dispatch")
        tokens = x[0].shape[0]
    else:
        _check_rows(x)
        tokens = x.shape[0]
    _check_routing(tokens, topk_idx, topk_weights, num_experts, capacity, ranks + len(lost),
                   dropless)
    layout = _Layout(num_experts, ranks, lost)
    if pre_quantised:
        return _dispatch_fp8_pair(fp8_mod.Fp8Rows(*x), topk_idx, topk_weights, layout,
                                  capacity, axes)
    if fp8:
        fp8_mod.check_scale_format(scale_format, "jaccl.moe_dispatch")
        fp8_mod.check_hidden(x.shape[1], "jaccl.moe_dispatch")
        return _dispatch_fp8(x, topk_idx, topk_weights, layout, capacity, axes, scale_format)
    return _dispatch(x, topk_idx, topk_weights, layout, capacity, axes)


def _check_rows(x):
    if np.ndim(x) != 2:
        raise ValueError(f"jaccl.moe_dispatch: x must be [tokens, hidden], got shape {np.shape(x)}")
    if np.dtype(x.dtype) not in DTYPES:
        raise TypeError(f"jaccl.moe_dispatch: x must be float32, bfloat16 or float16, not {x.dtype}")


def _check_routing(tokens, topk_idx, topk_weights, num_experts, capacity, ranks, dropless):
    if np.ndim(topk_idx) != 2 or topk_idx.shape[0] != tokens:
        raise ValueError(f"jaccl.moe_dispatch: topk_idx must be [tokens, k] with tokens = "
                         f"{tokens}, got {np.shape(topk_idx)}")
    if np.dtype(topk_idx.dtype) != np.int32:
        raise TypeError(f"jaccl.moe_dispatch: topk_idx must be int32, not {topk_idx.dtype}")
    if np.shape(topk_weights) != np.shape(topk_idx):
        raise ValueError(f"jaccl.moe_dispatch: topk_weights {np.shape(topk_weights)} must have "
                         f"topk_idx's shape {np.shape(topk_idx)}")
    if np.dtype(topk_weights.dtype) != np.float32:
        raise TypeError(f"jaccl.moe_dispatch: topk_weights must be float32, not {topk_weights.dtype}")
    if dropless:
        if capacity is not None:
            raise ValueError(f"jaccl.moe_dispatch: dropless=True takes no capacity (got "
                             f"{capacity!r}): every row arrives")
    elif not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"jaccl.moe_dispatch: capacity must be a positive int (or "
                         f"dropless=True), got {capacity!r}")
    if not isinstance(num_experts, (int, np.integer)) or num_experts < 1 or num_experts % ranks:
        raise ValueError(f"jaccl.moe_dispatch: num_experts={num_experts} must be a positive "
                         f"multiple of the layout's ranks {ranks} (the group size, plus "
                         "lost_ranks)")


def _check_lost(lost_ranks, ranks) -> tuple:
    """lost_ranks as a sorted tuple of ints, each a rank of the layout of ranks + len(lost)."""
    given = list(lost_ranks) if isinstance(lost_ranks, (tuple, list, np.ndarray)) else None
    if given is None or not all(isinstance(r, (int, np.integer)) and not isinstance(r, bool)
                                for r in given):
        raise TypeError(f"jaccl.moe_dispatch: lost_ranks must be a tuple of ints (ranks of the "
                        f"expert layout), got {lost_ranks!r}")
    lost = tuple(sorted(int(r) for r in given))
    layout = ranks + len(lost)
    if len(set(lost)) != len(lost) or any(not 0 <= r < layout for r in lost):
        raise ValueError(f"jaccl.moe_dispatch: lost_ranks={lost_ranks!r} must be distinct ranks "
                         f"of the layout of {layout} (the group's {ranks} and the lost ones)")
    return lost


class _Layout(NamedTuple):
    """Where experts live: num_experts split contiguously over ranks + len(lost) ranks, of which
    the group holds those not in `lost` (member i: the i-th of them). Hashable: a static
    argument of the custom_vjp functions."""
    num_experts: int
    ranks: int          # the group's size
    lost: tuple = ()

    @property
    def live_experts(self) -> int:
        return self.num_experts // (self.ranks + len(self.lost)) * self.ranks

    def routed(self, topk_idx):
        """(topk_idx in the group's numbering of the live experts, [E] pairs sent to lost
        experts). An expert of a lost rank becomes -1; ids outside [-1, num_experts) stay
        outside the live range (the dispatch raises on the caller's ids)."""
        E = self.num_experts
        if not self.lost:
            return topk_idx, jnp.zeros((E,), jnp.int32)
        per_rank = E // (self.ranks + len(self.lost))
        live = [r for r in range(self.ranks + len(self.lost)) if r not in self.lost]
        table = np.full(E, -1, np.int32)
        for member, r in enumerate(live):
            table[r * per_rank:(r + 1) * per_rank] = np.arange(per_rank) + member * per_rank
        known = (topk_idx >= 0) & (topk_idx < E)
        mapped = jnp.asarray(table)[jnp.clip(topk_idx, 0, E - 1)]
        idx = jnp.where(known, mapped, jnp.where(topk_idx < 0, topk_idx, self.live_experts))
        gone = jnp.where(known & (mapped < 0), topk_idx, E).reshape(-1)
        return idx, jnp.zeros((E + 1,), jnp.int32).at[gone].add(1)[:E]


@partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _dispatch(x, topk_idx, topk_weights, layout, capacity, axes):
    return _dispatch_fwd(x, topk_idx, topk_weights, layout, capacity, axes)[0]


def _routed(topk_idx, topk_weights, layout, capacity, axes):
    """The routing of every pair and the handle, router weights delivered. The handle keeps
    the caller's topk_idx (the dispatch checks its ids against num_experts)."""
    T, K = topk_idx.shape
    ranks, num_experts = layout.ranks, layout.num_experts
    E_loc = layout.live_experts // ranks
    # where rows land: [E_loc, capacity], or dropless [M] (capacity None)
    slots = (T * K * ranks,) if capacity is None else (E_loc, capacity)
    live_idx, lost = layout.routed(topk_idx)
    r = route(live_idx, num_experts=layout.live_experts, capacity=capacity, ranks=ranks,
              axis_name=axes, all_gather=all_gather)
    handle = MoeHandle(topk_idx, r.send_slot, r.counts, r.dropped,
                       jnp.zeros(slots, jnp.float32), r.send_pairs, r.send_tokens,
                       r.send_offsets, r.recv_rows, r.recv_offsets, lost)
    weights = _dispatch_rows(topk_weights.reshape(T * K, 1), handle, r.send_pairs,
                             int(np.prod(slots)), axes, num_experts)
    return r, handle._replace(recv_weights=weights.reshape(slots))


def _send_rows(rows, handle, axes, num_experts):
    """rows [T, W] -> [E_loc, C, W] ([M, W] dropless): each kept pair's token row in its
    expert's slot."""
    slots = handle.recv_weights.shape
    recv = _dispatch_rows(rows, handle, handle.send_tokens, int(np.prod(slots)), axes,
                          num_experts)
    return recv.reshape(slots + (rows.shape[1],))


def _dispatch_fwd(x, topk_idx, topk_weights, layout, capacity, axes):
    r, handle = _routed(topk_idx, topk_weights, layout, capacity, axes)
    out = (_send_rows(x, handle, axes, layout.num_experts), r.recv_count, handle)
    return out, handle


def _dispatch_bwd(layout, capacity, axes, handle, cotangents):
    d_recv = cotangents[0]
    T, K = handle.topk_idx.shape
    ones = jnp.ones((T, K), jnp.float32)
    dx = _return(d_recv.reshape(-1, d_recv.shape[-1]), handle, ones, axes, pair_dot=False)
    return dx, None, None


_dispatch.defvjp(_dispatch_fwd, _dispatch_bwd)


# FP8 dispatch: values and scales travel as two row exchanges of one routing.

def _send_fp8(rows: fp8_mod.Fp8Rows, handle, axes, num_experts):
    return fp8_mod.Fp8Rows(_send_rows(rows.values, handle, axes, num_experts),
                           _send_rows(rows.scales, handle, axes, num_experts))


@partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6))
def _dispatch_fp8(x, topk_idx, topk_weights, layout, capacity, axes, scale_format):
    return _dispatch_fp8_fwd(x, topk_idx, topk_weights, layout, capacity, axes,
                             scale_format)[0]


def _dispatch_fp8_fwd(x, topk_idx, topk_weights, layout, capacity, axes, scale_format):
    r, handle = _routed(topk_idx, topk_weights, layout, capacity, axes)
    recv = _send_fp8(fp8_mod.quantize_fp8(x, scale_format), handle, axes, layout.num_experts)
    like_x = jnp.zeros((0,), x.dtype)  # x's dtype, the cotangent's, as a residual
    return (recv, r.recv_count, handle), (handle, recv.scales, like_x)


def _dispatch_fp8_bwd(layout, capacity, axes, scale_format, residual, cotangents):
    """Straight-through: values = x / scale as if the cast were the identity, so a row's
    cotangent is d_values / scale (padding rows, scale 0, give 0), returned like _dispatch's."""
    handle, scales, like_x = residual
    d_values = cotangents[0].values.astype(jnp.float32)
    scale = jnp.repeat(fp8_mod.scales_as_float(scales), fp8_mod.BLOCK, axis=-1)
    rows = jnp.where(scale > 0, d_values / jnp.where(scale > 0, scale, 1.0), 0.0)
    return _dispatch_bwd(layout, capacity, axes, handle, (rows.astype(like_x.dtype),))


_dispatch_fp8.defvjp(_dispatch_fp8_fwd, _dispatch_fp8_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _dispatch_fp8_pair(rows, topk_idx, topk_weights, layout, capacity, axes):
    r, handle = _routed(topk_idx, topk_weights, layout, capacity, axes)
    return _send_fp8(rows, handle, axes, layout.num_experts), r.recv_count, handle


def _dispatch_fp8_pair_fwd(rows, topk_idx, topk_weights, layout, capacity, axes):
    return _dispatch_fp8_pair(rows, topk_idx, topk_weights, layout, capacity, axes), None


def _dispatch_fp8_pair_bwd(*_):
    raise TypeError("jaccl.moe_dispatch: an already quantised (values, scales) pair has no "
                    "gradient; pass the unquantised rows with fp8=True for a straight-through "
                    "gradient")


_dispatch_fp8_pair.defvjp(_dispatch_fp8_pair_fwd, _dispatch_fp8_pair_bwd)


# ----------------------------------------------------------------------- combine

def moe_combine(y, handle: MoeHandle, topk_weights, *, axis_name):
    """Sends expert outputs y [E_loc, C, H] ([M, H] after a dropless dispatch) back to the
    tokens they serve and returns
    out [T, H]: out[t] = sum over k ascending of topk_weights[t, k] * y[row of (t, k)],
    skipping masked and dropped pairs, accumulated in float32 and cast to y's dtype.
    Deterministic. Remote rows are sent first and local rows reduced while they travel
    (JACCL_MOE_SCHEDULE=arrival: in rank order, reducing at the end)."""
    axes = _common.normalize_axes(axis_name)
    _common.check_axes(axes, "moe_combine")
    if np.dtype(y.dtype) not in DTYPES:
        raise TypeError(f"jaccl.moe_combine: y must be float32, bfloat16 or float16, not {y.dtype}")
    slots = handle.recv_weights.shape
    if np.ndim(y) != len(slots) + 1 or y.shape[:-1] != slots:
        want = (f"[E_loc={slots[0]}, capacity={slots[1]}, hidden]" if len(slots) == 2 else
                f"[rows={slots[0]}, hidden] (dispatch was dropless)")
        raise ValueError(f"jaccl.moe_combine: y must be {want}, got {np.shape(y)}")
    if np.shape(topk_weights) != handle.topk_idx.shape or np.dtype(topk_weights.dtype) != np.float32:
        raise ValueError(f"jaccl.moe_combine: topk_weights must be float32 {handle.topk_idx.shape}")
    return _combine(y, handle, topk_weights, axes)


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def _combine(y, handle, topk_weights, axes):
    return _return(y.reshape(-1, y.shape[-1]), handle, topk_weights, axes, pair_dot=False)


def _combine_fwd(y, handle, topk_weights, axes):
    return _combine(y, handle, topk_weights, axes), (y, handle, topk_weights)


def _combine_bwd(axes, residual, d_out):
    y, handle, topk_weights = residual
    H = y.shape[-1]
    num_experts = handle.lost.shape[0]
    rows = _dispatch_rows(d_out, handle, handle.send_tokens, int(np.prod(y.shape[:-1])), axes,
                          num_experts)
    dy = (rows.reshape(y.shape).astype(jnp.float32) * handle.recv_weights[..., None]).astype(y.dtype)
    dw = _return(y.reshape(-1, H), handle, d_out.astype(y.dtype), axes, pair_dot=True)
    return dy, jax.tree.map(lambda _: None, handle), dw


_combine.defvjp(_combine_fwd, _combine_bwd)
