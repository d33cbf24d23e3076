"""The MoE reference: dispatch and combine in plain jax.numpy on all-gathered inputs (run
inside a shard_map), written from the semantics, not from the implementation.

XLA:CPU fuses a*b + c into one FMA (one rounding instead of two), which jaccl's combine,
like numpy, does not; so the reference forms the weighted rows in one program
(pair_products) and sums them over k in another (accumulate), where nothing can fuse."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def _slots(gi, e, capacity):
    """For expert e: [R, T] position of each (rank, token) among the expert's rows, or -1."""
    R, T, K = gi.shape
    routed = jnp.any(gi == e, axis=2).reshape(-1)             # (s, t) order = (rank, token)
    position = jnp.cumsum(routed) - 1
    return jnp.where(routed & (position < capacity), position, -1).reshape(R, T)


def dispatch(x, topk_idx, *, num_experts, capacity, axis):
    R = lax.axis_size(axis)
    E_loc = num_experts // R
    me = lax.axis_index(axis)
    gx = lax.all_gather(x, axis)                              # [R, T, H]
    gi = lax.all_gather(topk_idx, axis)                       # [R, T, K]
    recv, count, dropped = [], [], []
    for j in range(E_loc):
        e = me * E_loc + j
        slots = _slots(gi, e, capacity)                       # [R, T]
        rows = jnp.zeros((capacity + 1,) + x.shape[1:], x.dtype)
        rows = rows.at[jnp.where(slots >= 0, slots, capacity)].set(gx)[:capacity]
        recv.append(rows)
        count.append(jnp.sum(slots >= 0).astype(jnp.int32))
        dropped.append((jnp.sum(jnp.any(gi == e, axis=2)) - count[-1]).astype(jnp.int32))
    return jnp.stack(recv), jnp.stack(count), jnp.stack(dropped)


def pair_products(y, topk_idx, topk_weights, *, num_experts, capacity, axis):
    """[T, K, H] float32 weighted rows w[t,k] * y[row(t,k)], and [T, K] whether each exists."""
    R = lax.axis_size(axis)
    me = lax.axis_index(axis)
    T = topk_idx.shape[0]
    gy = lax.all_gather(y, axis).reshape((num_experts, capacity) + y.shape[2:])  # expert-major
    gi = lax.all_gather(topk_idx, axis)
    products, oks = [], []
    for k in range(topk_idx.shape[1]):
        e = topk_idx[:, k]
        slots = jnp.stack([_slots(gi, ee, capacity)[me] for ee in range(num_experts)])  # [E, T]
        slot = slots[jnp.maximum(e, 0), jnp.arange(T)]
        ok = (e >= 0) & (slot >= 0)
        row = gy[jnp.maximum(e, 0), jnp.maximum(slot, 0)].astype(jnp.float32)
        products.append(topk_weights[:, k, None] * row)
        oks.append(ok)
    del R
    return jnp.stack(products, 1), jnp.stack(oks, 1)


def accumulate(products, ok, dtype):
    acc = jnp.zeros((products.shape[0],) + products.shape[2:], jnp.float32)
    for k in range(products.shape[1]):
        acc = jnp.where(ok[:, k, None], acc + products[:, k], acc)
    return acc.astype(dtype)
